"""Bjontegaard delta rate (BD-rate): the mean rate difference of a test
rate-distortion curve against an anchor curve at equal quality.

G. Bjontegaard, "Calculation of average PSNR differences between RD-curves",
VCEG-M33, 2001: log-rate is fitted as a function of PSNR for each curve, both
fits are integrated over the PSNR interval the two curves share, and

    BD-rate = exp( (integral of (log R_test - log R_anchor) dPSNR) / (PSNR_hi - PSNR_lo) ) - 1

negative when the test curve needs less rate. Two fits:
  "pchip": piecewise cubic Hermite interpolation through the points
           (Fritsch-Carlson monotone slopes), the variant of VCEG-AL22 and
           of the JVET common test conditions; needs 2 points or more;
  "cubic": one cubic polynomial, least squares, as in VCEG-M33; needs 4 or more.
rate_difference_at_quality covers a curve of one point (one model): the
rate of that point over the anchor's interpolated rate at its PSNR, minus 1.
"""
import numpy as np


def _sorted_curve(points, what):
    """(psnr, log rate) arrays sorted by PSNR, from (rate, psnr) pairs."""
    rates = np.array([p[0] for p in points], dtype=np.float64)
    psnrs = np.array([p[1] for p in points], dtype=np.float64)
    if np.any(~np.isfinite(rates)) or np.any(rates <= 0) or np.any(~np.isfinite(psnrs)):
        raise ValueError(f"{what}: every rate must be positive and every PSNR finite")
    order = np.argsort(psnrs)
    psnrs, log_rates = psnrs[order], np.log(rates[order])
    if np.any(np.diff(psnrs) <= 0):
        raise ValueError(f"{what}: two points have the same PSNR")
    return psnrs, log_rates


def pchip_slopes(x, y):
    """Fritsch-Carlson slopes of the monotone piecewise cubic Hermite interpolant
    (the rule of scipy's PchipInterpolator) at the points x (increasing)."""
    h = np.diff(x)
    delta = np.diff(y) / h
    if len(x) == 2:
        return np.array([delta[0], delta[0]])
    d = np.zeros_like(y)
    for k in range(1, len(x) - 1):
        if delta[k - 1] * delta[k] > 0:
            w1, w2 = 2 * h[k] + h[k - 1], h[k] + 2 * h[k - 1]
            d[k] = (w1 + w2) / (w1 / delta[k - 1] + w2 / delta[k])
    d[0] = _end_slope(h[0], h[1], delta[0], delta[1])
    d[-1] = _end_slope(h[-1], h[-2], delta[-1], delta[-2])
    return d


def _end_slope(h0, h1, delta0, delta1):
    slope = ((2 * h0 + h1) * delta0 - h0 * delta1) / (h0 + h1)
    if np.sign(slope) != np.sign(delta0):
        return 0.0
    if np.sign(delta0) != np.sign(delta1) and abs(slope) > 3 * abs(delta0):
        return 3 * delta0
    return slope


def _hermite_basis_integrals(t):
    """Integrals from 0 to t of the cubic Hermite basis h00, h10, h01, h11."""
    t2, t3, t4 = t * t, t ** 3, t ** 4
    return (t4 / 2 - t3 + t, t4 / 4 - 2 * t3 / 3 + t2 / 2, -t4 / 2 + t3, t4 / 4 - t3 / 3)


def pchip_integral(x, y, lo, hi):
    """Exact integral over [lo, hi] (inside [x0, xn]) of the pchip interpolant."""
    d = pchip_slopes(x, y)
    total = 0.0
    for k in range(len(x) - 1):
        a, b = max(lo, x[k]), min(hi, x[k + 1])
        if a >= b:
            continue
        h = x[k + 1] - x[k]
        ia, ib = _hermite_basis_integrals((a - x[k]) / h), _hermite_basis_integrals((b - x[k]) / h)
        coefficients = (y[k], h * d[k], y[k + 1], h * d[k + 1])
        total += h * sum(c * (qb - qa) for c, qa, qb in zip(coefficients, ia, ib))
    return total


def pchip_value(x, y, at):
    """The pchip interpolant at one point inside [x0, xn]."""
    d = pchip_slopes(x, y)
    k = min(max(int(np.searchsorted(x, at, side="right")) - 1, 0), len(x) - 2)
    h = x[k + 1] - x[k]
    t = (at - x[k]) / h
    return ((2 * t ** 3 - 3 * t ** 2 + 1) * y[k] + (t ** 3 - 2 * t ** 2 + t) * h * d[k]
            + (-2 * t ** 3 + 3 * t ** 2) * y[k + 1] + (t ** 3 - t ** 2) * h * d[k + 1])


def _cubic_integral(x, y, lo, hi):
    antiderivative = np.polyint(np.polyfit(x, y, 3))
    return np.polyval(antiderivative, hi) - np.polyval(antiderivative, lo)


def bd_rate(anchor, test, fit="pchip"):
    """BD-rate of test against anchor, as a fraction (-0.1: 10% less rate).
    anchor, test: sequences of (rate, psnr). Raises ValueError when the
    curves do not overlap in PSNR or have too few points for the fit."""
    minimum = {"pchip": 2, "cubic": 4}.get(fit)
    if minimum is None:
        raise ValueError(f"unknown BD-rate fit '{fit}' (pchip or cubic)")
    for name, curve in (("anchor", anchor), ("test", test)):
        if len(curve) < minimum:
            raise ValueError(f"{name} curve has {len(curve)} points; the {fit} fit needs {minimum}")
    xa, ya = _sorted_curve(anchor, "anchor")
    xt, yt = _sorted_curve(test, "test")
    lo, hi = max(xa[0], xt[0]), min(xa[-1], xt[-1])
    if lo >= hi:
        raise ValueError(f"the curves share no PSNR range (anchor {xa[0]:.2f}-{xa[-1]:.2f} dB, "
                         f"test {xt[0]:.2f}-{xt[-1]:.2f} dB)")
    integral = pchip_integral if fit == "pchip" else _cubic_integral
    mean_log_difference = (integral(xt, yt, lo, hi) - integral(xa, ya, lo, hi)) / (hi - lo)
    return float(np.expm1(mean_log_difference))


def rate_difference_at_quality(anchor, point):
    """rate / anchor_rate(psnr) - 1 for one (rate, psnr) point, the anchor's
    log-rate interpolated (pchip) at the point's PSNR; None outside its range."""
    xa, ya = _sorted_curve(anchor, "anchor")
    rate, quality = point
    if len(xa) < 2 or not xa[0] <= quality <= xa[-1]:
        return None
    return float(rate / np.exp(pchip_value(xa, ya, quality)) - 1.0)
