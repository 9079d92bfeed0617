#!/usr/bin/env python3
"""Tests of the numeric parts of the rate-distortion comparison: PSNR,
MS-SSIM, BD-rate, the published-curves file, the Plexus points of the
command line, the compact result files (lab/results/codec/). python3 + numpy only; run:
python3 lab/rd/test_rd.py   (exit 77, a skip, without numpy)
CompareRunnersTest also needs PIL, matplotlib, plexus.codec importable and PLEXUS_AE (else it skips).
Expected values come from the definitions worked by hand, not from the code."""
import json
import math
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import numpy as np  # noqa: E402
except ImportError:
    print("numpy is not installed (Debian: python3-numpy; tools/install-deps.sh brings it with python3-matplotlib)")
    sys.exit(77)

import plexus_points  # noqa: E402
import published  # noqa: E402
import quality  # noqa: E402
import report  # noqa: E402
import result_files  # noqa: E402
from bjontegaard import bd_rate, pchip_integral, rate_difference_at_quality  # noqa: E402


def random_image(seed, size=(200, 200, 3)):
    return np.random.default_rng(seed).integers(0, 256, size=size, dtype=np.uint8)


class PsnrTest(unittest.TestCase):
    def test_one_pixel_off_by_peak(self):
        # One channel value differs by 255 among N = 10*10*3 values: MSE = 255^2 / N, PSNR = 10 log10(N).
        a = np.zeros((10, 10, 3), dtype=np.uint8)
        b = a.copy()
        b[3, 4, 1] = 255
        self.assertAlmostEqual(quality.psnr(a, b), 10 * math.log10(300), places=12)

    def test_uniform_error(self):
        # Every value off by 1: MSE = 1, PSNR = 20 log10(255) = 48.1308 dB.
        a = np.full((8, 8, 3), 100, dtype=np.uint8)
        self.assertAlmostEqual(quality.psnr(a, a + 1), 48.130803608679, places=9)

    def test_identical_is_infinite_and_shapes_must_match(self):
        a = random_image(1, (16, 16, 3))
        self.assertEqual(quality.psnr(a, a), math.inf)
        with self.assertRaises(ValueError):
            quality.psnr(a, a[:8])


class MsSsimTest(unittest.TestCase):
    def test_window_is_the_normalised_gaussian(self):
        g = quality.gaussian_window_1d()
        self.assertEqual(len(g), 11)
        self.assertAlmostEqual(g.sum(), 1.0, places=15)
        # g(5 +- 1) / g(5) = exp(-1 / (2 * 1.5^2))
        self.assertAlmostEqual(g[4] / g[5], math.exp(-1 / 4.5), places=14)

    def test_identical_images_give_one(self):
        a = random_image(2)
        self.assertAlmostEqual(quality.ms_ssim(a, a), 1.0, places=12)

    def test_two_constant_images(self):
        # Constant x = 100, y = 110: every variance and covariance is 0, so cs = C2 / C2 = 1 at
        # every scale, and the luminance term at the last scale is
        # (2*100*110 + C1) / (100^2 + 110^2 + C1) with C1 = (0.01 * 255)^2 = 6.5025.
        # MS-SSIM = that ^ 0.1333.
        a = np.full((176, 176, 3), 100, dtype=np.uint8)
        b = np.full((176, 176, 3), 110, dtype=np.uint8)
        expected = ((22000 + 6.5025) / (22100 + 6.5025)) ** 0.1333
        self.assertAlmostEqual(quality.ms_ssim(a, b), expected, places=12)

    def test_brightness_offset_changes_only_luminance(self):
        # y = x + 20 (no clipping: x in 0..200): sigma_y = sigma_x and sigma_xy = sigma_x^2, so
        # cs = 1 at every scale; only the last scale's luminance term is below 1.
        x = np.random.default_rng(3).integers(0, 201, size=(192, 192, 3)).astype(np.uint8)
        y = x + 20
        value = quality.ms_ssim(x, y)
        _, contrast_structure = quality.ssim_terms(x[..., 0].astype(float), y[..., 0].astype(float))
        self.assertAlmostEqual(contrast_structure, 1.0, places=9)
        self.assertLess(value, 1.0)
        self.assertGreater(value, 0.99)

    def test_single_window_ssim_against_direct_formula(self):
        # An 11x11 plane has exactly one window: the terms are the textbook SSIM formulas with
        # Gaussian-weighted moments, written out here directly.
        rng = np.random.default_rng(4)
        x = rng.uniform(0, 255, (11, 11))
        y = np.clip(x + rng.normal(0, 20, (11, 11)), 0, 255)
        offsets = np.arange(11) - 5.0
        w = np.exp(-(offsets[:, None] ** 2 + offsets[None, :] ** 2) / (2 * 1.5 ** 2))
        w /= w.sum()
        mx, my = (w * x).sum(), (w * y).sum()
        vx, vy = (w * (x - mx) ** 2).sum(), (w * (y - my) ** 2).sum()
        cxy = (w * (x - mx) * (y - my)).sum()
        c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
        luminance, contrast_structure = quality.ssim_terms(x, y)
        self.assertAlmostEqual(luminance, (2 * mx * my + c1) / (mx * mx + my * my + c1), places=10)
        self.assertAlmostEqual(contrast_structure, (2 * cxy + c2) / (vx + vy + c2), places=10)

    def test_more_noise_lowers_it_and_it_is_symmetric(self):
        x = random_image(5, (192, 192, 3)).astype(np.float64)
        x = np.clip(np.cumsum(np.cumsum(x - 127.5, axis=0), axis=1) / 50 + 128, 0, 255).astype(np.uint8)  # smooth
        rng = np.random.default_rng(6)
        light = np.clip(x + rng.normal(0, 5, x.shape), 0, 255).astype(np.uint8)
        heavy = np.clip(x + rng.normal(0, 30, x.shape), 0, 255).astype(np.uint8)
        self.assertGreater(quality.ms_ssim(x, light), quality.ms_ssim(x, heavy))
        self.assertAlmostEqual(quality.ms_ssim(x, heavy), quality.ms_ssim(heavy, x), places=12)

    def test_too_small_is_an_error(self):
        a = random_image(7, (175, 300, 3))
        with self.assertRaisesRegex(ValueError, "at least 176x176"):
            quality.ms_ssim(a, a)


class BdRateTest(unittest.TestCase):
    anchor = [(0.12, 26.0), (0.25, 28.5), (0.5, 31.0), (0.9, 33.4), (1.5, 35.9)]

    def test_ninety_percent_rate_is_minus_ten_percent(self):
        test = [(0.9 * r, q) for r, q in self.anchor]
        for fit in ("pchip", "cubic"):
            self.assertAlmostEqual(bd_rate(self.anchor, test, fit), -0.10, places=12)
            self.assertAlmostEqual(bd_rate(test, self.anchor, fit), 1 / 0.9 - 1, places=12)

    def test_log_linear_curves_sampled_differently(self):
        # log R = 0.2 q - 5 for the anchor (q = 30..38), log R = 0.2 q - 5 + log 0.8 for the
        # test (other PSNRs, 31..40): shared range 31..38, BD-rate = 0.8 - 1 = -20%.
        anchor = [(math.exp(0.2 * q - 5), q) for q in (30, 32, 34, 36, 38)]
        test = [(0.8 * math.exp(0.2 * q - 5), q) for q in (31, 33.5, 35, 37, 40)]
        for fit in ("pchip", "cubic"):
            self.assertAlmostEqual(bd_rate(anchor, test, fit), -0.20, places=12)

    def test_difference_growing_with_quality(self):
        # log R_test - log R_anchor = 0.01 (q - 30), averaged over q in 30..38: 0.04, BD = e^0.04 - 1.
        qs = (30, 32, 34, 36, 38)
        anchor = [(math.exp(0.2 * q - 5), q) for q in qs]
        test = [(math.exp(0.2 * q - 5 + 0.01 * (q - 30)), q) for q in qs]
        for fit in ("pchip", "cubic"):
            self.assertAlmostEqual(bd_rate(anchor, test, fit), math.exp(0.04) - 1, places=12)

    def test_pchip_integral_of_a_line_and_a_parabola_segment(self):
        x = np.array([0.0, 1.0, 3.0])
        self.assertAlmostEqual(pchip_integral(x, 2 * x + 1, 0.5, 2.5), (2.5 ** 2 + 2.5) - (0.25 + 0.5), places=12)

    def test_pchip_against_scipy_when_installed(self):
        # An independent implementation of the same interpolant (python3-scipy; not a dependency).
        try:
            from scipy.interpolate import PchipInterpolator
        except ImportError:
            self.skipTest("scipy is not installed (Debian: python3-scipy)")
        x = np.array([25.6, 27.2, 28.0, 28.8, 30.1, 31.1, 32.1, 34.7])
        y = np.log([0.11, 0.19, 0.24, 0.30, 0.41, 0.51, 0.62, 0.99])
        reference = PchipInterpolator(x, y)
        for lo, hi in ((25.6, 34.7), (26.0, 29.5), (30.5, 30.9)):
            self.assertAlmostEqual(pchip_integral(x, y, lo, hi), reference.integrate(lo, hi), places=12)

    def test_errors(self):
        far = [(r, q + 20) for r, q in self.anchor]
        with self.assertRaisesRegex(ValueError, "share no PSNR range"):
            bd_rate(self.anchor, far)
        with self.assertRaisesRegex(ValueError, "needs 4"):
            bd_rate(self.anchor, self.anchor[:3], "cubic")
        with self.assertRaisesRegex(ValueError, "same PSNR"):
            bd_rate(self.anchor, [(0.1, 30.0), (0.2, 30.0)])

    def test_one_point(self):
        # On a log-linear anchor the interpolated rate at q is exact: 0.7 x gives -30%.
        anchor = [(math.exp(0.2 * q - 5), q) for q in (30, 32, 34, 36, 38)]
        self.assertAlmostEqual(rate_difference_at_quality(anchor, (0.7 * math.exp(0.2 * 33.3 - 5), 33.3)), -0.3,
                               places=12)
        self.assertIsNone(rate_difference_at_quality(anchor, (1.0, 45.0)))


class ReportTest(unittest.TestCase):
    @staticmethod
    def row(codec, setting, image, bpp, psnr, ms_ssim):
        return {"codec": codec, "label": codec.upper(), "setting": setting, "image": image, "bytes": 0,
                "pixels": 1, "bpp": bpp, "psnr": psnr, "ms_ssim": ms_ssim}

    def test_means_per_setting_and_one_point_comparison(self):
        rows = []
        for setting, q in enumerate((30, 32, 34, 36)):
            # Two images per setting, rates exp(0.2 q - 5) x 0.9 and x 1.1: mean exp(0.2 q - 5).
            rows.append(self.row("anchor", setting, "a.png", 0.9 * math.exp(0.2 * q - 5), q - 1, 0.90 + 0.01 * setting))
            rows.append(self.row("anchor", setting, "b.png", 1.1 * math.exp(0.2 * q - 5), q + 1, 0.96 + 0.01 * setting))
        rows.append(self.row("plexus-x", "m", "a.png", 0.5 * math.exp(0.2 * 33 - 5), 32.5, 0.95))
        rows.append(self.row("plexus-x", "m", "b.png", 0.5 * math.exp(0.2 * 33 - 5), 33.5, 0.97))
        curves = report.curves_from(rows, {"anchor": "standard", "plexus-x": "plexus"})
        first = curves["anchor"]["points"][0]
        self.assertAlmostEqual(first["bpp"], math.exp(0.2 * 30 - 5), places=12)
        self.assertAlmostEqual(first["psnr"], 30.0, places=12)
        self.assertAlmostEqual(first["ms_ssim"], 0.93, places=12)
        self.assertAlmostEqual(first["ms_ssim_db"], -10 * math.log10(0.07), places=10)
        (comparison,) = report.bd_rates(curves, "pchip")
        self.assertEqual(comparison["psnr_kind"], "at one point")
        # The anchor's mean curve is not exactly log-linear at q = 33 (pchip), so a loose bound:
        self.assertAlmostEqual(comparison["psnr"], -0.5, delta=0.01)
        self.assertIn("| PLEXUS-X | ANCHOR |", report.markdown(curves, [comparison], 2, "pchip"))


def write_text_file(folder, name, text):
    path = os.path.join(folder, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


RESULTS = pathlib.Path(__file__).resolve().parent.parent / "results"
RECORD = {"claim": "a test", "device": "CPU", "commit": "abc1234", "command": "python3 lab/rd/compare.py x",
          "date": "2026-01-01"}


class ResultFilesTest(unittest.TestCase):
    @staticmethod
    def curves():
        anchor = {"label": "Anchor", "kind": "standard", "points": [
            {"setting": str(q), "images": 2, "bpp": math.exp(0.2 * q - 5), "psnr": float(q), "ms_ssim": 0.9,
             "ms_ssim_db": 10.0} for q in (30, 32, 34, 36)]}
        # Half the anchor's rate at every quality: BD-rate -50%.
        test = {"label": "Plexus x", "kind": "plexus", "points": [
            {"setting": f"level {i}", "images": 2, "bpp": 0.5 * math.exp(0.2 * q - 5), "psnr": float(q),
             "ms_ssim": 0.9, "ms_ssim_db": 10.0} for i, q in enumerate((31, 33, 35))]}
        published_curve = {"label": "p (published)", "kind": "published", "points": []}
        return {"anchor": anchor, "plexus-x": test, "published-p": published_curve}

    def test_written_and_read_back(self):
        with tempfile.TemporaryDirectory() as folder:
            written = result_files.write_curves(folder, self.curves(), RECORD, {"plexus-x": {"images": 2}})
            # One file per standard and Plexus curve, none for the published one.
            self.assertEqual(sorted(p.name for p in written), ["anchor.json", "x.json"])
            data = json.loads((pathlib.Path(folder) / "x.json").read_text())
            self.assertEqual(data["commit"], "abc1234")
            self.assertEqual(data["results"][0], {"setting": "level 0", "bpp": 0.5 * math.exp(0.2 * 31 - 5),
                                                  "psnr": 31.0, "ms_ssim": 0.9})
            curves = result_files.read_curves(sorted(written, reverse=True))
        self.assertEqual(list(curves), ["anchor", "plexus-x"])  # standard codecs first
        self.assertAlmostEqual(curves["plexus-x"]["points"][0]["ms_ssim_db"], 10.0, places=12)
        (row,) = report.bd_rates(curves, "pchip")
        self.assertAlmostEqual(row["psnr"], -0.5, places=9)

    def test_a_record_without_its_commit_is_refused(self):
        with tempfile.TemporaryDirectory() as folder:
            with self.assertRaisesRegex(ValueError, "'anchor': no commit"):
                result_files.write_curves(folder, self.curves(), dict(RECORD, commit=""))

    def test_bad_files_name_the_file_and_the_point(self):
        good = {**RECORD, "codec": "webp", "label": "WebP", "kind": "standard",
                "results": [{"setting": "1", "bpp": 0.5, "psnr": 30.0, "ms_ssim": 0.95}]}
        cases = [({k: v for k, v in good.items() if k != "date"}, "no date"),
                 (dict(good, kind="other"), "kind 'other'"),
                 (dict(good, results=[]), "no points"),
                 (dict(good, results=[{"setting": "1", "bpp": 0.5, "psnr": 30.0}]), r"results\[0\]: a point needs"),
                 (dict(good, results=[{"setting": "1", "bpp": -1, "psnr": 30.0, "ms_ssim": 0.9}]), "must be positive"),
                 (dict(good, results=[{"setting": "1", "bpp": 0.5, "psnr": "x", "ms_ssim": 0.9}]), "psnr 'x'")]
        with tempfile.TemporaryDirectory() as folder:
            for data, message in cases:
                path = write_text_file(folder, "webp.json", json.dumps(data))
                with self.assertRaisesRegex(ValueError, "webp.json.*" + message):
                    result_files.read_curve(path)
            first = write_text_file(folder, "a.json", json.dumps(good))
            second = write_text_file(folder, "b.json", json.dumps(good))
            with self.assertRaisesRegex(ValueError, "b.json: codec 'webp' is in .*a.json too"):
                result_files.read_curves([first, second])

    def test_every_committed_result_file_has_its_record(self):
        files = sorted(RESULTS.rglob("*.json"))
        self.assertTrue(files, f"no result files under {RESULTS}")
        for path in files:
            data = json.loads(path.read_text())
            for key in result_files.RECORD_KEYS + ["results"]:
                self.assertTrue(data.get(key), f"{path}: no {key}")
            self.assertRegex(data["date"], r"^\d{4}-\d{2}-\d{2}$", str(path))
            self.assertLess(len(path.read_text().splitlines()), 300, f"{path}: over 300 lines")

    def test_the_committed_curves_give_the_bd_rates_recorded_with_them(self):
        # The BD-rates compare.py computed from the per-image measurements, recomputed from the compact files.
        for folder, published_file in (("kodak-768", "kodak-768-published-rd.tsv"), ("kodak-crops", None)):
            paths = sorted((RESULTS / "codec" / folder).glob("*.json"))
            curves = result_files.read_curves(paths)
            if published_file:
                curves.update(published.as_report_curves(published.select(
                    published.read_published(os.path.join(os.path.dirname(__file__), published_file)),
                    published.DEFAULT_CODECS, published_file)))
            computed = {(r["plexus"], r["codec"]): r for r in report.bd_rates(curves, "pchip")}
            plexus_files = [p for p in paths if json.loads(p.read_text())["kind"] == "plexus"]
            self.assertTrue(plexus_files, folder)
            for path in plexus_files:
                data = json.loads(path.read_text())
                for recorded in data["bd_rates"]:
                    row = computed[(data["codec"], recorded["against"])]
                    self.assertAlmostEqual(row["psnr"], recorded["psnr"], places=9, msg=f"{path} {recorded}")
                    if recorded["ms_ssim"] is not None:
                        self.assertAlmostEqual(row["ms_ssim"], recorded["ms_ssim"], places=9, msg=str(path))


class PublishedFileTest(unittest.TestCase):
    def setUp(self):
        self.folder = tempfile.TemporaryDirectory()
        self.addCleanup(self.folder.cleanup)

    def read(self, text):
        return published.read_published(write_text_file(self.folder.name, "curves.tsv", text))

    def test_comments_blank_lines_and_curves_in_file_order(self):
        curves = self.read("# source: somewhere\n"
                           "\n"
                           "codec\tbpp\tpsnr_rgb_db\n"
                           "vtm\t0.25\t31.2\n"
                           "  # an indented comment\n"
                           "av1\t0.11\t27.5\n"
                           "vtm\t0.125\t28.5\n"
                           "compressai mbt2018-mean\t1.5\t40.0\r\n")
        self.assertEqual(list(curves), ["vtm", "av1", "compressai mbt2018-mean"])
        self.assertEqual(curves["vtm"], [(0.25, 31.2), (0.125, 28.5)])
        self.assertEqual(curves["compressai mbt2018-mean"], [(1.5, 40.0)])
        # As report curves: sorted by rate, labelled as published, without MS-SSIM.
        (key, curve), = published.as_report_curves({"vtm": curves["vtm"]}).items()
        self.assertEqual(curve["label"], "vtm (published)")
        self.assertEqual(curve["kind"], "published")
        self.assertEqual([p["bpp"] for p in curve["points"]], [0.125, 0.25])
        self.assertIsNone(curve["points"][0]["ms_ssim"])
        self.assertNotEqual(key, "vtm")  # never the key of a measured codec

    def test_bad_lines_name_the_file_and_the_line(self):
        header = "# comment\ncodec\tbpp\tpsnr_rgb_db\n"
        cases = [
            (header + "vtm\t0.2\t30\nvtm 0.4 33\n", r"line 4: expected 3 tab-separated fields"),
            (header + "vtm\t0.2\t30\t1\n", r"line 3: expected 3 tab-separated fields"),
            (header + "vtm\tabc\t30\n", r"line 3: bpp 'abc' is not a number"),
            (header + "vtm\t-0.2\t30\n", r"line 3: bpp '-0.2' must be positive"),
            (header + "vtm\t0.2\tnan\n", r"line 3: PSNR 'nan' must be finite"),
            (header + "\t0.2\t30\n", r"line 3: the codec name is empty"),
            ("# comment\ncodec,bpp,psnr_rgb_db\n", r"line 2: expected the header"),
        ]
        for text, message in cases:
            with self.subTest(message=message):
                with self.assertRaisesRegex(ValueError, r"curves\.tsv, " + message):
                    self.read(text)
        with self.assertRaisesRegex(ValueError, r"curves\.tsv: no header"):
            self.read("# only a comment\n")

    def test_select_keeps_the_order_asked_and_names_what_is_missing(self):
        curves = self.read("codec\tbpp\tpsnr_rgb_db\na\t0.1\t25\nb\t0.1\t26\nc\t0.1\t27\n")
        self.assertEqual(list(published.select(curves, ["c", "a"], "f.tsv")), ["c", "a"])
        with self.assertRaisesRegex(ValueError, r"f\.tsv has no curve 'd' \(it has: a, b, c\)"):
            published.select(curves, ["a", "d"], "f.tsv")

    def test_the_repository_file_has_the_default_curves(self):
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kodak-768-published-rd.tsv")
        curves = published.select(published.read_published(path), published.DEFAULT_CODECS, path)
        self.assertEqual([len(points) for points in curves.values()], [8, 8, 12, 8])
        self.assertEqual(curves["vtm"][0], (0.0482, 26.145))  # the file's first VTM row

    def test_bd_rate_of_a_plexus_curve_against_a_published_curve(self):
        # Published: log R = 0.2 q - 7 at q = 28..36 (a line in log-rate, so both fits are exact).
        # Plexus: log R = 0.2 q - 7 + log 0.75 + 0.02 (q - 30) at q = 30, 31.5, 33, 34.5, 37.
        # Shared range 30..36; the mean of log R_plexus - log R_published over it is
        # log 0.75 + 0.02 * (33 - 30) = log 0.75 + 0.06, so BD-rate = 0.75 e^0.06 - 1 = -20.36%.
        rows = "".join(f"paper x\t{math.exp(0.2 * q - 7)!r}\t{q}\n" for q in (28, 30, 32, 34, 36))
        curves = report.curves_from(
            [{"codec": "plexus-y", "label": "Plexus y", "setting": str(q), "image": "a.png", "bytes": 0, "pixels": 1,
              "bpp": 0.75 * math.exp(0.2 * q - 7 + 0.02 * (q - 30)), "psnr": q, "ms_ssim": 0.9 + 0.001 * q}
             for q in (30, 31.5, 33, 34.5, 37)], {"plexus-y": "plexus"})
        curves.update(published.as_report_curves(self.read("codec\tbpp\tpsnr_rgb_db\n" + rows)))
        for fit in ("pchip", "cubic"):
            (row,) = report.bd_rates(curves, fit)
            self.assertEqual(row["codec_label"], "paper x (published)")
            self.assertEqual(row["psnr_kind"], "BD-rate")
            self.assertAlmostEqual(row["psnr"], 0.75 * math.exp(0.06) - 1, places=12)
            self.assertIsNone(row["ms_ssim"])
        table = report.markdown(curves, [row], 1, "cubic")
        self.assertIn("| Plexus y | paper x (published) | -20.4% | n/a |", table)
        self.assertIn("| paper x (published) | 1 | 0.247 | 28.00 | n/a | n/a |", table)


class PlexusPointsTest(unittest.TestCase):
    def setUp(self):
        self.folder = tempfile.TemporaryDirectory()
        self.addCleanup(self.folder.cleanup)
        # A model path with a ':' in a folder's name: the levels follow the last ':'.
        os.mkdir(os.path.join(self.folder.name, "run:2"))
        self.model = write_text_file(os.path.join(self.folder.name, "run:2"), "model.safetensors", "weights")

    def test_one_point_per_level_with_the_level_in_compress_and_the_cache_key(self):
        points = plexus_points.level_points([f"gain={self.model}:0, 1.5,3"])
        self.assertEqual([p.level for p in points], [0.0, 1.5, 3.0])
        self.assertEqual({p.curve for p in points}, {"gain"})
        self.assertEqual(points[1].compress_args, ("--model", self.model, "--level", "1.5"))
        self.assertEqual(points[1].decompress_args, ("--model", self.model))  # the level is in the file
        self.assertEqual(points[1].setting, "run:2/model.safetensors level 1.5")
        identities = [p.identity("d" * 64) for p in points]
        self.assertEqual(len({str(i) for i in identities}), 3)
        self.assertEqual(identities[2], ["d" * 64, "level", 3.0])
        self.assertNotEqual(points[0].folder_name("d" * 64), points[1].folder_name("d" * 64))

    def test_a_plain_model_keeps_the_key_of_the_model_alone(self):
        (point,) = plexus_points.model_points([f"bls={self.model}"])
        self.assertEqual(point.identity("d" * 64), ["d" * 64])
        self.assertEqual(point.compress_args, ("--model", self.model))
        self.assertIsNone(point.level)

    def test_bad_levels(self):
        for entry, message in ((f"gain={self.model}", "no levels after the last ':'"),
                               (f"gain={self.model}:", "no levels"),
                               (f"gain={self.model}:1,x", "level 'x' is not a number"),
                               (f"gain={self.model}:-1", "level '-1' must be a finite number >= 0"),
                               (f"gain={self.model}:inf", "must be a finite number"),
                               (f"gain={self.model}x:1", "does not exist"),
                               (f"{self.model}:1", "is not NAME=MODEL_FILE")):
            with self.subTest(entry=entry):
                with self.assertRaisesRegex(ValueError, message):
                    plexus_points.level_points([entry])

    def catalog(self):
        os.mkdir(os.path.join(self.folder.name, "q2"))
        write_text_file(os.path.join(self.folder.name, "q2"), "model.safetensors", "weights")
        return write_text_file(self.folder.name, "quality-catalog.json", json.dumps({"qualities": [
            {"quality": 1, "spec": "s", "lambda": 0.001, "model": "q1/model.safetensors"},
            {"quality": 2, "spec": "s", "lambda": 0.002, "model": "q2/model.safetensors"}]}))

    def test_quality_points_run_compress_with_the_quality_and_the_catalog_read_here(self):
        catalog = self.catalog()
        (point,) = plexus_points.quality_points(["shipped=2"], catalog)
        self.assertEqual(point.compress_args, ("--quality", "2"))
        self.assertEqual(point.model, pathlib.Path(self.folder.name) / "q2" / "model.safetensors")
        self.assertEqual(point.decompress_args, ("--model", str(point.model)))
        self.assertEqual(plexus_points.environment_for(point, {})["PLEXUS_AE_QUALITY_CATALOG"],
                         str(pathlib.Path(catalog).resolve()))
        # The shipped model of a quality is that model file: the same results as --plexus of it.
        self.assertEqual(point.identity("d" * 64), ["d" * 64])

    def test_the_qualities_of_a_variable_rate_model_are_its_levels(self):
        os.mkdir(os.path.join(self.folder.name, "vr"))
        write_text_file(os.path.join(self.folder.name, "vr"), "model.safetensors", "weights")
        catalog = write_text_file(self.folder.name, "quality-catalog.json", json.dumps({"qualities": [
            {"quality": q, "spec": "s", "lambda": 0.001 * q, "level": q - 1, "model": "vr/model.safetensors"}
            for q in (1, 2, 3)]}))
        points = plexus_points.quality_points(["shipped=1,3"], catalog)
        self.assertEqual([p.level for p in points], [0.0, 2.0])
        # One model file, two cache keys and folders: the levels keep their results apart.
        self.assertEqual(points[1].identity("d" * 64), ["d" * 64, "level", 2.0])
        self.assertNotEqual(points[0].folder_name("d" * 64), points[1].folder_name("d" * 64))

    def test_bad_qualities(self):
        catalog = self.catalog()
        for entry, message in (("shipped=1", "quality 1's model .* is not in this copy"),
                               ("shipped=3", "has no quality 3 \\(it has 1, 2\\)"),
                               ("shipped=0", "quality '0' is not a whole number >= 1"),
                               ("shipped=2.5", "quality '2.5' is not a whole number")):
            with self.subTest(entry=entry):
                with self.assertRaisesRegex(ValueError, message):
                    plexus_points.quality_points([entry], catalog)
        with self.assertRaisesRegex(ValueError, "cannot read the quality catalog"):
            plexus_points.quality_points(["shipped=1"], os.path.join(self.folder.name, "missing.json"))

    def test_repeats_are_run_once(self):
        points = plexus_points.level_points([f"gain={self.model}:1,1,2"]) + plexus_points.model_points(
            [f"bls={self.model}", f"bls={self.model}"])
        self.assertEqual([(p.curve, p.level) for p in plexus_points.unique(points)],
                         [("gain", 1.0), ("gain", 2.0), ("bls", None)])


def plexus_package_and_cli():
    """Why CompareRunnersTest cannot run here, or None."""
    try:
        import matplotlib  # noqa: F401
        import PIL  # noqa: F401
        import plexus.codec  # noqa: F401
    except ImportError as missing:
        return f"{missing}"
    return None if os.environ.get("PLEXUS_AE") else "PLEXUS_AE (the plexus-ae executable) is not set"


@unittest.skipIf(plexus_package_and_cli(), plexus_package_and_cli())
class CompareRunnersTest(unittest.TestCase):
    """compare.py codes Plexus points in process through plexus.codec, or with plexus-ae: the same
    files and the same measurements either way."""
    REPOSITORY = pathlib.Path(__file__).resolve().parents[2]

    def compare(self, work, runner):
        model = self.REPOSITORY / "models" / "trained" / "bls2017" / "model.safetensors"
        done = subprocess.run([sys.executable, str(self.REPOSITORY / "lab" / "rd" / "compare.py"), str(work / "images"),
                               "--out", str(work / runner), "--codecs", "none", "--device", "cpu", "--jobs", "1",
                               "--plexus-ae", os.environ["PLEXUS_AE"], "--plexus-runner", runner,
                               "--plexus", f"bls2017={model}"], capture_output=True, text=True)
        self.assertEqual(done.returncode, 0, done.stderr)
        return work / runner

    def test_package_and_cli_give_the_same_files_and_points(self):
        from PIL import Image
        with tempfile.TemporaryDirectory() as folder:
            work = pathlib.Path(folder)
            (work / "images").mkdir()
            with Image.open(self.REPOSITORY / "data" / "eval-sample" / "kodim04.png") as image:
                image.crop((0, 0, 192, 176)).save(work / "images" / "crop.png")
            package, cli = self.compare(work, "package"), self.compare(work, "cli")
            (package_file,) = (package / "files").rglob("crop.pxae")
            (cli_file,) = (cli / "files").rglob("crop.pxae")
            self.assertGreater(package_file.stat().st_size, 16)
            self.assertEqual(package_file.read_bytes(), cli_file.read_bytes())
            self.assertEqual((package / "points.csv").read_text(), (cli / "points.csv").read_text())
            shutil.rmtree(work / "package")


if __name__ == "__main__":
    unittest.main()
