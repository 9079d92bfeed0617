"""A PyTorch nn.Module built from a Plexus model spec (models/specs/*.json),
so that the reference the benchmark times has the same architecture as the
Plexus model by construction: one submodule per node with parameters, named
as Plexus names them ("<node>.<parameter>", e.g. "g_a0.weight"), and one
forward that runs the nodes in dependency order.

Each layer's math follows its Plexus header (layers/<name>/<name>.h):
  Conv2d, ConvTranspose2d   nn.Conv2d / nn.ConvTranspose2d with groups and dilation; a
                            Conv2d with mask "A" or "B" multiplies its weight by the mask
                            (weights [Co, Ci/G, k, k] and [Ci, Co/G, k, k], as Plexus
                            stores them)
  GDN, IGDN                 y = x / sqrt(beta + gamma x^2) (IGDN: times), beta and
                            gamma reparametrised (stored = sqrt(value + pedestal))
  ReLU, LeakyReLU, Sigmoid, Tanh (scale * tanh), Abs, GELU, Add, Mul (broadcasting)
  LayerNorm, GroupNorm      F.layer_norm over the channels of each pixel (channels-last,
                            as Swin), F.group_norm; parameters gamma and beta
  Softmax, MatMul           torch.softmax along the axis; scale * op(A) @ op(B), batched
  WindowPartition/Reverse   Swin's window partition (torch.roll by -shift, heads split
                            off the channels) and its inverse, by reshape and permute
  AvgPool2d                 F.avg_pool2d, count_include_pad=True
  CheckerboardMask          x where (h + w) is even ("keep": "even") or odd, else 0
  Concat, Split             along channels (axis 1)
  PixelShuffle              F.pixel_shuffle (the same channel order)
  GainUnit                  y = x exp(s), s interpolated between two levels' log_gains
  UniformNoise              training x + U(-1/2, 1/2); eval round(x)
  QuantizeAroundMean        training y + U(-1/2, 1/2); eval round(y - mu) + mu; the
                            "straight_through" second output round(y - mu) + mu
                            in both modes; gradient 1 to y, 0 to mu
  FactorizedEntropyModel    Balle et al. 2018 appendix 6.1, filters (3, 3, 3)
  GaussianConditional       Phi((1/2 - |v|)/s) - Phi((-1/2 - |v|)/s), v = y_hat - mean
  MSELoss                   mean squared error, optionally weighted per image
  RateLoss                  sum of -log2 of every likelihood / (N H W)
Both lower bounds of the entropy models (likelihood_bound, scale_bound, the
GDN reparametrisation) take the "identity if towards" gradient of
tensorflow-compression and CompressAI, as Plexus does.

Rounding is torch.round (halves to even) where Plexus rounds halves away from
zero; the two differ only on exact halves.
"""
import json
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class _LowerBound(torch.autograd.Function):
    """max(x, bound) whose gradient passes where x >= bound or where it points
    towards raising x (grad < 0): tfc's and CompressAI's LowerBound."""

    @staticmethod
    def forward(ctx, x, bound):
        ctx.save_for_backward(x)
        ctx.bound = bound
        return torch.clamp_min(x, bound)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        passes = (x >= ctx.bound) | (grad < 0)
        return grad * passes.to(grad.dtype), None


def lower_bound(x, bound):
    return _LowerBound.apply(x, bound)


class GDN(nn.Module):
    """GDN / IGDN with Plexus's (and CompressAI's) reparametrisation; the
    contraction over channels is a 1x1 convolution of x^2 with gamma."""

    def __init__(self, channels, inverse=False, beta_min=1e-6, gamma_init=0.1, reparam_offset=2.0 ** -18):
        super().__init__()
        self.inverse = inverse
        self.pedestal = reparam_offset ** 2
        self.beta_bound = math.sqrt(beta_min + self.pedestal)
        self.gamma_bound = reparam_offset
        self.beta = nn.Parameter(torch.sqrt(torch.ones(channels) + self.pedestal))
        self.gamma = nn.Parameter(torch.sqrt(gamma_init * torch.eye(channels) + self.pedestal))

    def forward(self, x):
        c = x.shape[1]
        beta = lower_bound(self.beta, self.beta_bound) ** 2 - self.pedestal
        gamma = lower_bound(self.gamma, self.gamma_bound) ** 2 - self.pedestal
        norm = F.conv2d(x * x, gamma.view(c, c, 1, 1).to(x.dtype), beta.to(x.dtype))
        return x * torch.sqrt(norm) if self.inverse else x * torch.rsqrt(norm)


class FactorizedEntropyModel(nn.Module):
    """Per-channel cumulative density, filters (3, 3, 3); parameters matrix0..3,
    bias0..3, factor0..2 as Plexus (and CompressAI's EntropyBottleneck) name them."""

    def __init__(self, channels, filters=(3, 3, 3), init_scale=10.0, likelihood_bound=1e-9):
        super().__init__()
        dims = (1,) + tuple(filters) + (1,)
        self.layers = len(filters) + 1
        self.likelihood_bound = likelihood_bound
        scale = init_scale ** (1.0 / self.layers)
        for k in range(self.layers):
            init = math.log(math.expm1(1.0 / scale / dims[k + 1]))
            setattr(self, f"matrix{k}", nn.Parameter(torch.full((channels, dims[k + 1], dims[k]), init)))
            setattr(self, f"bias{k}", nn.Parameter(torch.rand(channels, dims[k + 1], 1) - 0.5))
            if k < self.layers - 1:
                setattr(self, f"factor{k}", nn.Parameter(torch.zeros(channels, dims[k + 1], 1)))

    def logits(self, v):  # v: [C, 1, L]
        for k in range(self.layers):
            v = torch.matmul(F.softplus(getattr(self, f"matrix{k}")), v) + getattr(self, f"bias{k}")
            if k < self.layers - 1:
                v = v + torch.tanh(getattr(self, f"factor{k}")) * torch.tanh(v)
        return v

    def forward(self, y):
        shape = y.shape
        c = shape[1]
        v = y.float().transpose(0, 1).reshape(c, 1, -1)
        lower, upper = self.logits(v - 0.5), self.logits(v + 0.5)
        sign = torch.where(lower + upper > 0, -1.0, 1.0).detach()  # s = +1 where u + l = 0
        likelihood = torch.abs(torch.sigmoid(sign * upper) - torch.sigmoid(sign * lower))
        likelihood = lower_bound(likelihood, self.likelihood_bound)
        return likelihood.reshape((c, shape[0]) + tuple(shape[2:])).transpose(0, 1)


class MaskedConv2d(nn.Conv2d):
    """Conv2d with mask "A" or "B": tap (i, j) of a k x k kernel is used only when i k + j < (k k - 1) / 2
    ("A") or <= (k k - 1) / 2 ("B"), the weight multiplied by the 0/1 mask in every forward."""

    def __init__(self, *args, mask, **kwargs):
        super().__init__(*args, **kwargs)
        k = self.kernel_size[0]
        centre = (k * k - 1) // 2
        taps = torch.arange(k * k).reshape(k, k)
        self.register_buffer("mask", (taps < centre if mask == "A" else taps <= centre).to(self.weight.dtype),
                             persistent=False)

    def forward(self, x):
        return self._conv_forward(x, self.weight * self.mask, self.bias)


class GainUnit(nn.Module):
    """y[n, c] = x[n, c] exp(s[n, c]), s interpolated between the log-gains of
    the two levels around each image's level (Cui et al. 2021)."""

    def __init__(self, channels, levels, init=None):
        super().__init__()
        init = init or [0.0] * levels
        self.levels = levels
        self.log_gains = nn.Parameter(torch.tensor(init, dtype=torch.float32).view(levels, 1).repeat(1, channels))

    def forward(self, x, level):
        q = torch.clamp(torch.nan_to_num(level.float(), nan=0.0), 0, self.levels - 1)
        i = torch.clamp(torch.floor(q), max=self.levels - 2).long()
        t = (q - i.float()).unsqueeze(1)
        s = (1 - t) * self.log_gains[i] + t * self.log_gains[i + 1]  # [N, C]
        return x * torch.exp(s).view(s.shape + (1,) * (x.dim() - 2)).to(x.dtype)


class Norm(nn.Module):
    """LayerNorm (groups None: over the channels of each position, x [N, C, ...] moved to channels-last for
    F.layer_norm) or GroupNorm (F.group_norm); parameters gamma and beta [C] as Plexus names them."""

    def __init__(self, channels, affine=True, eps=1e-5, groups=None):
        super().__init__()
        self.eps, self.groups = eps, groups
        self.gamma = nn.Parameter(torch.ones(channels)) if affine else None
        self.beta = nn.Parameter(torch.zeros(channels)) if affine else None

    def forward(self, x):
        if self.groups is not None:
            return F.group_norm(x, self.groups, self.gamma, self.beta, self.eps)
        y = F.layer_norm(x.movedim(1, -1), (x.shape[1],), self.gamma, self.beta, self.eps)
        return y.movedim(-1, 1)


def window_partition(x, w, shift, heads):
    """[N, C, H, W] -> [N*(H/w)*(W/w), heads, w*w, C/heads]: y[(n*H/w + a)*W/w + b, g, i*w + j, d] =
    x[n, g*C/heads + d, (a*w + i + shift) mod H, (b*w + j + shift) mod W]."""
    n, c, h, wd = x.shape
    if shift:
        x = torch.roll(x, (-shift, -shift), (2, 3))
    x = x.reshape(n, heads, c // heads, h // w, w, wd // w, w).permute(0, 3, 5, 1, 4, 6, 2)
    return x.reshape(n * (h // w) * (wd // w), heads, w * w, c // heads)


def window_reverse(windows, shape, w, shift):
    """The inverse of window_partition, back to `shape` [N, C, H, W]."""
    n, c, h, wd = shape
    heads, d = windows.shape[1], windows.shape[3]
    x = windows.reshape(n, h // w, wd // w, heads, w, w, d).permute(0, 3, 6, 1, 4, 2, 5).reshape(n, c, h, wd)
    return torch.roll(x, (shift, shift), (2, 3)) if shift else x


def _round_straight_through(y, mu):
    """round(y - mu) + mu, differentiated as y (gradient 1 to y, 0 to mu)."""
    return y + (torch.round(y - mu) + mu - y).detach()


def _noise(x):
    return x + torch.empty_like(x).uniform_(-0.5, 0.5)


def _standard_normal_cdf(x):
    return 0.5 * torch.erfc(-x * (2 ** -0.5))


def gaussian_likelihood(y_hat, scales, means, scale_bound, likelihood_bound):
    v = torch.abs(y_hat.float() - (means.float() if means is not None else 0.0))
    s = lower_bound(scales.float(), scale_bound)
    p = _standard_normal_cdf((0.5 - v) / s) - _standard_normal_cdf((-0.5 - v) / s)
    return lower_bound(p, likelihood_bound)


def topological_order(nodes, inputs):
    """The nodes in an order where every node comes after the producers of its inputs."""
    ready, order, pending = set(inputs), [], list(nodes)
    while pending:
        runnable = [n for n in pending if all(b in ready for b in n["inputs"])]
        if not runnable:
            raise ValueError("the spec's graph has a cycle or reads a blob nothing produces: "
                             + ", ".join(n["name"] for n in pending))
        for n in runnable:
            order.append(n)
            ready.update(n["outputs"])
        pending = [n for n in pending if n not in runnable]
    return order


def _output_channels(node, channels):
    """The channel counts (axis 1) of a node's outputs, from its inputs'; None for scalars."""
    t, p, c = node["type"], node.get("params", {}), [channels[b] for b in node["inputs"]]
    if t in ("Conv2d", "ConvTranspose2d"):
        return [p["out_channels"]]
    if t == "Concat":
        return [sum(c)]
    if t == "Split":
        return list(p["sizes"])
    if t == "PixelShuffle":
        return [c[0] // p["upscale_factor"] ** 2]
    if t in ("MSELoss", "RateLoss"):
        return [None]
    if t == "QuantizeAroundMean":
        return [c[0]] * (2 if p.get("synthesis", "noise") == "straight_through" else 1)
    if t == "WindowPartition":  # [B, heads, w*w, C/heads]: dimension 1 holds the heads
        return [p.get("heads", 1)]
    if t == "WindowReverse":  # the reference's shape
        return [c[1]]
    return [c[0]]


def _make_module(node, in_channels):
    t, p = node["type"], node.get("params", {})
    if t == "Conv2d" and p.get("mask", "none") != "none":
        return MaskedConv2d(in_channels, p["out_channels"], p["kernel"], p.get("stride", 1), p.get("padding", 0),
                            dilation=p.get("dilation", 1), groups=p.get("groups", 1), bias=p.get("bias", True),
                            mask=p["mask"])
    if t == "Conv2d":
        return nn.Conv2d(in_channels, p["out_channels"], p["kernel"], p.get("stride", 1), p.get("padding", 0),
                         dilation=p.get("dilation", 1), groups=p.get("groups", 1), bias=p.get("bias", True))
    if t == "ConvTranspose2d":
        return nn.ConvTranspose2d(in_channels, p["out_channels"], p["kernel"], p.get("stride", 1),
                                  p.get("padding", 0), output_padding=p.get("output_padding", 0),
                                  groups=p.get("groups", 1), bias=p.get("bias", True), dilation=p.get("dilation", 1))
    if t == "LayerNorm":
        return Norm(in_channels, p.get("elementwise_affine", True), p.get("eps", 1e-5))
    if t == "GroupNorm":
        return Norm(in_channels, p.get("affine", True), p.get("eps", 1e-5), groups=p["groups"])
    if t in ("GDN", "IGDN"):
        return GDN(in_channels, inverse=t == "IGDN", beta_min=p.get("beta_min", 1e-6),
                   gamma_init=p.get("gamma_init", 0.1), reparam_offset=p.get("reparam_offset", 2.0 ** -18))
    if t == "FactorizedEntropyModel":
        return FactorizedEntropyModel(in_channels, tuple(p.get("filters", [3, 3, 3])), p.get("init_scale", 10.0),
                                      p.get("likelihood_bound", 1e-9))
    if t == "GainUnit":
        return GainUnit(in_channels, p["levels"], p.get("init"))
    return None


STATELESS = {"ReLU", "LeakyReLU", "Sigmoid", "Tanh", "Abs", "GELU", "Add", "Mul", "Concat", "Split", "PixelShuffle",
             "Softmax", "MatMul", "WindowPartition", "WindowReverse", "AvgPool2d", "CheckerboardMask", "UniformNoise",
             "QuantizeAroundMean", "GaussianConditional", "MSELoss", "RateLoss"}


class SpecModel(nn.Module):
    """forward(**inputs) -> dict of every blob the spec computes (the losses
    "mse" and "bpp" among them). `input_channels` gives the channel count of
    every spec input that has channels ({"image": 3}; "level" and
    "mse_weight" are per image and need none)."""

    def __init__(self, spec, input_channels=None):
        super().__init__()
        self.spec = spec
        self.order = topological_order(spec["nodes"], spec["inputs"])
        channels = {name: None for name in spec["inputs"]}
        channels.update(input_channels or {"image": 3})
        self.layers = nn.ModuleDict()
        for node in self.order:
            if node["type"] not in STATELESS and node["type"] not in self.layers_with_parameters():
                raise ValueError(f"node '{node['name']}': layer type {node['type']} has no PyTorch translation")
            module = _make_module(node, channels[node["inputs"][0]])
            if module is not None:
                self.layers[node["name"]] = module
            channels.update(zip(node["outputs"], _output_channels(node, channels)))

    def named_plexus_parameters(self):
        """(name, parameter) as Plexus names them: "<node>.<parameter>"."""
        return [(name.split(".", 1)[1], p) for name, p in self.named_parameters()]

    def forward(self, **inputs):
        blobs = dict(inputs)
        for node in self.order:
            xs = [blobs[b] for b in node["inputs"]]
            outs = self._run(node, xs)
            blobs.update(zip(node["outputs"], outs))
        return blobs

    def _run(self, node, xs):
        t, p = node["type"], node.get("params", {})
        if t in self.layers_with_parameters():
            module = self.layers[node["name"]]
            return [module(*xs)]
        if t == "ReLU":
            return [F.relu(xs[0])]
        if t == "LeakyReLU":
            return [F.leaky_relu(xs[0], p.get("negative_slope", 0.01))]
        if t == "Sigmoid":
            return [torch.sigmoid(xs[0])]
        if t == "Tanh":
            return [p.get("scale", 1.0) * torch.tanh(xs[0])]
        if t == "Abs":
            return [torch.abs(xs[0])]
        if t == "GELU":
            return [F.gelu(xs[0], approximate=p.get("approximate", "none"))]
        if t == "Softmax":
            return [torch.softmax(xs[0], dim=p.get("axis", 1))]
        if t == "MatMul":
            a = xs[0].transpose(-1, -2) if p.get("transpose_a", False) else xs[0]
            b = xs[1].transpose(-1, -2) if p.get("transpose_b", False) else xs[1]
            return [p.get("scale", 1.0) * torch.matmul(a, b)]
        if t == "WindowPartition":
            return [window_partition(xs[0], p["window"], p.get("shift", 0), p.get("heads", 1))]
        if t == "WindowReverse":
            return [window_reverse(xs[0], xs[1].shape, p["window"], p.get("shift", 0))]
        if t == "AvgPool2d":
            return [F.avg_pool2d(xs[0], p["kernel"], p.get("stride", p["kernel"]), p.get("padding", 0))]
        if t == "CheckerboardMask":
            h, w = xs[0].shape[-2:]
            parity = (torch.arange(h, device=xs[0].device)[:, None] + torch.arange(w, device=xs[0].device)) % 2
            return [xs[0] * (parity == (0 if p.get("keep", "even") == "even" else 1)).to(xs[0].dtype)]
        if t == "Add":
            out = xs[0]
            for x in xs[1:]:
                out = out + x
            return [out]
        if t == "Mul":
            out = xs[0]
            for x in xs[1:]:
                out = out * x
            return [out]
        if t == "Concat":
            return [torch.cat(xs, dim=1)]
        if t == "Split":
            return list(torch.split(xs[0], p["sizes"], dim=1))
        if t == "PixelShuffle":
            return [F.pixel_shuffle(xs[0], p["upscale_factor"])]
        if t == "UniformNoise":
            return [_noise(xs[0]) if self.training else xs[0] + (torch.round(xs[0]) - xs[0]).detach()]
        if t == "QuantizeAroundMean":
            y, mu = xs
            rounded = _round_straight_through(y, mu)
            y_hat = _noise(y) if self.training else rounded
            return [y_hat, rounded] if p.get("synthesis", "noise") == "straight_through" else [y_hat]
        if t == "GaussianConditional":
            means = xs[2] if len(xs) > 2 else None
            return [gaussian_likelihood(xs[0], xs[1], means, p.get("scale_bound", 0.11),
                                        p.get("likelihood_bound", 1e-9))]
        if t == "MSELoss":
            err = (xs[0].float() - xs[1].float()) ** 2
            if len(xs) > 2:
                err = err * xs[2].float().view((-1,) + (1,) * (err.dim() - 1))
            return [err.mean()]
        if t == "RateLoss":
            image = xs[-1]
            pixels = image.shape[0] * image.shape[2] * image.shape[3]
            return [sum(-torch.log2(lik.float()).sum() for lik in xs[:-1]) / pixels]
        raise ValueError(f"node '{node['name']}': unknown layer type {t}")

    @staticmethod
    def layers_with_parameters():
        return ("Conv2d", "ConvTranspose2d", "GDN", "IGDN", "FactorizedEntropyModel", "GainUnit", "LayerNorm",
                "GroupNorm")


def load_spec(path):
    with open(path) as f:
        return json.load(f)


def rate_levels(spec):
    """K of a variable-rate spec (its GainUnit nodes' "levels"), 0 otherwise."""
    levels = {n["params"]["levels"] for n in spec["nodes"] if n["type"] == "GainUnit"}
    if len(levels) > 1:
        raise ValueError("the GainUnit nodes disagree on levels: " + str(sorted(levels)))
    return levels.pop() if levels else 0


def spread_levels(batch, levels):
    """Image n's rate level: n mod K, so every level is trained (plexus-bench does the same)."""
    return [float(n % levels) for n in range(batch)]
