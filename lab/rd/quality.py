"""Image quality of a decoded 8-bit RGB image against its original: PSNR and
MS-SSIM, in numpy only.

PSNR: 10 log10(255^2 / MSE), the MSE over every pixel and all three RGB
channels (one number per image; the mean over images is taken by the caller).

MS-SSIM: Wang, Simoncelli, Bovik, "Multi-scale structural similarity for
image quality assessment", Asilomar 2003, with the constants of their code:
an 11x11 Gaussian window of sigma 1.5 (normalised to sum 1, applied without
padding, "valid"), K1 = 0.01, K2 = 0.03, L = 255, five scales weighted
(0.0448, 0.2856, 0.3001, 0.2363, 0.1333), 2x2 average pooling between scales
(an odd last row or column dropped). At each scale j

    cs_j = mean over windows of (2 sigma_xy + C2) / (sigma_x^2 + sigma_y^2 + C2)
    l    = mean over windows of (2 mu_x mu_y + C1) / (mu_x^2 + mu_y^2 + C1)   (last scale only)
    MS-SSIM = l^w5 * prod_j max(cs_j, 0)^wj     (cs_5 in the product too)

computed on each of R, G, B separately and averaged over the three channels,
the convention of pytorch_msssim (CompressAI's evaluation) and
tf.image.ssim_multiscale. Negative cs (anti-correlated images) is clamped to
0 so the power stays real.
"""
import math

import numpy as np

MS_SSIM_WEIGHTS = (0.0448, 0.2856, 0.3001, 0.2363, 0.1333)
WINDOW_SIZE = 11
WINDOW_SIGMA = 1.5
K1, K2, PEAK = 0.01, 0.03, 255.0


def psnr(original, decoded):
    """PSNR in dB of two uint8 arrays of one shape; inf when they are equal."""
    _check_pair(original, decoded)
    mse = np.mean((original.astype(np.float64) - decoded.astype(np.float64)) ** 2)
    return math.inf if mse == 0 else 10.0 * math.log10(PEAK * PEAK / mse)


def gaussian_window_1d(size=WINDOW_SIZE, sigma=WINDOW_SIGMA):
    """The 1-D factor g of the separable window w(i, j) = g(i) g(j), sum(g) = 1."""
    offsets = np.arange(size, dtype=np.float64) - (size - 1) / 2.0
    g = np.exp(-(offsets ** 2) / (2.0 * sigma * sigma))
    return g / g.sum()


def _filter_valid(plane, g):
    """Correlates a 2-D plane with g along rows and then columns, "valid" only."""
    n = len(g)
    rows = sum(g[k] * plane[k:plane.shape[0] - n + 1 + k, :] for k in range(n))
    return sum(g[k] * rows[:, k:rows.shape[1] - n + 1 + k] for k in range(n))


def ssim_terms(x, y):
    """Mean luminance term and mean contrast-structure term of one channel
    pair (float64 planes at least WINDOW_SIZE on each side)."""
    g = gaussian_window_1d()
    c1, c2 = (K1 * PEAK) ** 2, (K2 * PEAK) ** 2
    mu_x, mu_y = _filter_valid(x, g), _filter_valid(y, g)
    var_x = _filter_valid(x * x, g) - mu_x * mu_x
    var_y = _filter_valid(y * y, g) - mu_y * mu_y
    cov_xy = _filter_valid(x * y, g) - mu_x * mu_y
    luminance = (2.0 * mu_x * mu_y + c1) / (mu_x * mu_x + mu_y * mu_y + c1)
    contrast_structure = (2.0 * cov_xy + c2) / (var_x + var_y + c2)
    return float(luminance.mean()), float(contrast_structure.mean())


def _halve(plane):
    h, w = plane.shape[0] // 2 * 2, plane.shape[1] // 2 * 2
    p = plane[:h, :w]
    return 0.25 * (p[0::2, 0::2] + p[1::2, 0::2] + p[0::2, 1::2] + p[1::2, 1::2])


def ms_ssim_channel(x, y):
    """MS-SSIM of one channel pair (2-D float64 planes)."""
    value = 1.0
    for scale, weight in enumerate(MS_SSIM_WEIGHTS):
        luminance, contrast_structure = ssim_terms(x, y)
        value *= max(contrast_structure, 0.0) ** weight
        if scale == len(MS_SSIM_WEIGHTS) - 1:
            value *= max(luminance, 0.0) ** weight
        else:
            x, y = _halve(x), _halve(y)
    return value


def ms_ssim(original, decoded):
    """MS-SSIM of two uint8 RGB (H, W, 3) arrays, the mean over channels."""
    _check_pair(original, decoded)
    smallest = WINDOW_SIZE * 2 ** (len(MS_SSIM_WEIGHTS) - 1)
    if min(original.shape[:2]) < smallest:
        raise ValueError(f"MS-SSIM needs images of at least {smallest}x{smallest} pixels "
                         f"(5 scales of an 11-pixel window), got {original.shape[1]}x{original.shape[0]}")
    a, b = original.astype(np.float64), decoded.astype(np.float64)
    if a.ndim == 2:
        return ms_ssim_channel(a, b)
    return float(np.mean([ms_ssim_channel(a[..., c], b[..., c]) for c in range(a.shape[2])]))


def _check_pair(original, decoded):
    if original.shape != decoded.shape:
        raise ValueError(f"decoded image is {decoded.shape}, original {original.shape}")
