"""The Plexus points of a comparison, from the command line: what to run
(plexus-ae compress and decompress arguments), which curve each point joins,
and what identifies its result in the cache.

  --plexus NAME=MODEL_FILE               one point: the model
  --plexus-list FILE                     NAME=MODEL_FILE lines (# comments)
  --plexus-levels NAME=MODEL_FILE:L1,L2  one point per level of a variable-rate
                                         model (compress --level L; decompress
                                         reads the level from the file)
  --plexus-quality NAME=Q1,Q2            one point per shipped quality
                                         (compress --quality Q)

A point's identity (`identity`) is the model file's content with what is
given to compress besides the model: the level; a quality is its model file,
so `--quality 3` and `--model` of the same file share their results.
"""
import json
import math
import os
import pathlib
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple


@dataclass(frozen=True)
class PlexusPoint:
    curve: str                  # the curve's NAME
    model: pathlib.Path         # the model file (for --quality, the one the catalog names)
    setting: str                # the point's label in the tables
    compress_args: Tuple[str, ...]
    decompress_args: Tuple[str, ...]
    level: Optional[float] = None
    quality: Optional[int] = None
    environment: Tuple[Tuple[str, str], ...] = field(default=())  # for plexus-ae, besides the inherited one

    def identity(self, model_digest):
        """The cache key's part naming this point, given the model file's SHA-256."""
        return [model_digest] if self.level is None else [model_digest, "level", self.level]

    def folder_name(self, model_digest):
        """The sub-folder of the curve's folder that holds this point's files."""
        return model_digest[:12] if self.level is None else f"{model_digest[:12]}-level-{self.level!r}"


def _split_name(entry, what):
    name, sep, rest = entry.partition("=")
    if not sep or not name.strip() or not rest.strip():
        raise ValueError(f"'{entry}' is not {what}")
    return name.strip(), rest.strip()


def _existing_model(path, name):
    model = pathlib.Path(path)
    if not model.is_file():
        raise ValueError(f"model file '{path}' (for '{name}') does not exist")
    return model


def _model_setting(model):
    return model.parent.name + "/" + model.name if model.parent.name else model.name


def model_points(pairs, list_file=None):
    """--plexus NAME=MODEL_FILE and the lines of --plexus-list: one point per model."""
    entries = list(pairs or [])
    if list_file:
        for line in pathlib.Path(list_file).read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                entries.append(line)
    points = []
    for entry in entries:
        name, path = _split_name(entry, "NAME=MODEL_FILE")
        model = _existing_model(path, name)
        points.append(PlexusPoint(name, model, _model_setting(model), ("--model", str(model)), ("--model", str(model))))
    return points


def parse_level(text, entry):
    try:
        level = float(text)
    except ValueError:
        raise ValueError(f"'{entry}': level '{text}' is not a number") from None
    if not math.isfinite(level) or level < 0:
        raise ValueError(f"'{entry}': level '{text}' must be a finite number >= 0")
    return level


def level_points(entries):
    """--plexus-levels NAME=MODEL_FILE:L1,L2,...: one point per level of one variable-rate model."""
    points = []
    for entry in entries or []:
        name, rest = _split_name(entry, "NAME=MODEL_FILE:L1,L2,...")
        path, sep, levels = rest.rpartition(":")
        if not sep or not path or not levels.strip() or pathlib.Path(rest).is_file():
            raise ValueError(f"'{entry}' is not NAME=MODEL_FILE:L1,L2,... (no levels after the last ':')")
        model = _existing_model(path, name)
        for text in levels.split(","):
            level = parse_level(text.strip(), entry)
            # repr: the shortest text that reads back as the same float, so the level given is the level run.
            points.append(PlexusPoint(name, model, f"{_model_setting(model)} level {level:g}",
                                      ("--model", str(model), "--level", repr(level)), ("--model", str(model)),
                                      level=level))
    return points


def read_quality_catalog(path):
    """{quality: (model path, rate level or None)} of a quality catalog
    (models/trained/quality-catalog.json): each entry's "model" is relative to the catalog's
    folder; a variable-rate model's qualities share its file and differ in "level"."""
    try:
        catalog = json.loads(pathlib.Path(path).read_text())
        entries = catalog["qualities"]
        return {int(e["quality"]): (pathlib.Path(path).parent / e["model"],
                                    float(e["level"]) if "level" in e else None) for e in entries}
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"cannot read the quality catalog '{path}': {error}") from None


def default_quality_catalog(repository):
    """What plexus-ae reads: $PLEXUS_AE_QUALITY_CATALOG, else this repository's catalog."""
    return os.environ.get("PLEXUS_AE_QUALITY_CATALOG") or str(repository / "models" / "trained" / "quality-catalog.json")


def quality_points(entries, catalog_path):
    """--plexus-quality NAME=Q1,Q2,...: one point per shipped quality. compress gets --quality Q
    with PLEXUS_AE_QUALITY_CATALOG set to the catalog read here, so both name the same model;
    decompress gets that model with --model (without it, plexus-ae would look for the model among
    the models of its own data folder, which need not be this catalog's)."""
    if not entries:
        return []
    catalog = read_quality_catalog(catalog_path)
    environment = (("PLEXUS_AE_QUALITY_CATALOG", str(pathlib.Path(catalog_path).resolve())),)
    points = []
    for entry in entries:
        name, qualities = _split_name(entry, "NAME=Q1,Q2,...")
        for text in qualities.split(","):
            text = text.strip()
            if not text.isdigit() or int(text) < 1:
                raise ValueError(f"'{entry}': quality '{text}' is not a whole number >= 1")
            quality = int(text)
            if quality not in catalog:
                raise ValueError(f"'{entry}': the quality catalog '{catalog_path}' has no quality {quality} "
                                 f"(it has {', '.join(str(q) for q in sorted(catalog))})")
            model, level = catalog[quality]
            if not model.is_file():
                raise ValueError(f"'{entry}': quality {quality}'s model '{model}' is not in this copy "
                                 f"(plexus-ae compress --quality {quality} prints the command that trains it)")
            # The level keys the cache too: the qualities of a variable-rate model share its file.
            points.append(PlexusPoint(name, model, f"quality {quality}", ("--quality", str(quality)),
                                      ("--model", str(model)), level=level, quality=quality,
                                      environment=environment))
    return points


def unique(points):
    """The points without repeats (the same curve, model file and level), in order."""
    seen, kept = set(), []
    for point in points:
        key = (point.curve, str(point.model), point.level, point.quality)
        if key not in seen:
            seen.add(key)
            kept.append(point)
    return kept


def environment_for(point, base=None) -> Dict[str, str]:
    merged = dict(os.environ if base is None else base)
    merged.update(dict(point.environment))
    return merged


def describe(point, model_digest) -> Dict[str, object]:
    """The point as curves.json lists it."""
    entry = {"name": point.curve, "model": str(point.model), "sha256": model_digest}
    if point.level is not None:
        entry["level"] = point.level
    if point.quality is not None:
        entry["quality"] = point.quality
    return entry

