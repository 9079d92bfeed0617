"""The transforms that bls2017, bmshj2018-factorized, bmshj2018-hyperprior and mbt2018-mean share:
the GDN analysis, the IGDN synthesis, the factorized entropy model and the losses, with the node
names the codec and the trained models expect (g_a*, g_s*, y, y_hat, x_hat, likelihoods, ...)."""

FACTORIZED = dict(filters=[3, 3, 3], init_scale=10, likelihood_bound=1e-09)
GAUSSIAN = dict(scale_bound=0.11, likelihood_bound=1e-09)


def analysis(spec, stages):
    """image -> y: one Conv2d per (out_channels, kernel, stride) stage, GDN between them."""
    x = "image"
    for i, (out, kernel, stride) in enumerate(stages):
        last = i == len(stages) - 1
        x = spec.conv(f"g_a{i}", x, out, kernel, stride, output="y" if last else None)
        if not last:
            x = spec.node(f"g_a{i}_gdn", "GDN", [x], [f"g_a{i}_norm"])
    return x


def synthesis(spec, stages, x="y_hat"):
    """y_hat -> x_hat: one ConvTranspose2d per (out_channels, kernel, stride) stage, IGDN between them."""
    for i, (out, kernel, stride) in enumerate(stages):
        last = i == len(stages) - 1
        x = spec.conv(f"g_s{i}", x, out, kernel, stride, transposed=True, output="x_hat" if last else None)
        if not last:
            x = spec.node(f"g_s{i}_igdn", "IGDN", [x], [f"g_s{i}_norm"])
    return x


def factorized_entropy_model(spec, name, x, likelihoods):
    return spec.node(name, "FactorizedEntropyModel", [x], [likelihoods], **FACTORIZED)


def mean_scale_hyperprior(spec, hyper, latent):
    """mbt2018-mean's hyperprior on y of `latent` channels: hyper-analysis y -> conv 3x3/1 -> LeakyReLU ->
    conv 5x5/2 -> LeakyReLU -> conv 5x5/2 = z (`hyper` channels), z_hat under a factorized entropy model,
    hyper-synthesis to the scales and means of y (transposed 5x5/2 twice, then 3x3 to 2 * latent), y_hat
    quantised around the means under the Gaussian conditional ("likelihoods", "z_likelihoods")."""

    def leaky(name, x):
        return spec.node(name + "_act", "LeakyReLU", [x], [name + "_leaky"])

    x = leaky("h_a0", spec.conv("h_a0", "y", hyper, 3))
    x = leaky("h_a1", spec.conv("h_a1", x, hyper, 5, 2))
    spec.conv("h_a2", x, hyper, 5, 2, output="z")
    spec.node("hyper_quantizer", "UniformNoise", ["z"], ["z_hat"])
    factorized_entropy_model(spec, "hyper_entropy_model", "z_hat", "z_likelihoods")
    x = leaky("h_s0", spec.conv("h_s0", "z_hat", latent, 5, 2, transposed=True))
    x = leaky("h_s1", spec.conv("h_s1", x, latent * 3 // 2, 5, 2, transposed=True))
    spec.conv("h_s2", x, 2 * latent, 3, output="gaussian_params")
    spec.node("gaussian_params_split", "Split", ["gaussian_params"], ["scales", "means"], sizes=[latent, latent])
    spec.node("quantizer", "QuantizeAroundMean", ["y", "means"], ["y_hat"], synthesis="noise")
    spec.node("gaussian_conditional", "GaussianConditional", ["y_hat", "scales", "means"], ["likelihoods"],
              **GAUSSIAN)


def losses(spec, likelihoods):
    """lambda * 255^2 * mse + bpp: the MSE of x_hat and the bits of every likelihood given."""
    spec.node("distortion", "MSELoss", ["x_hat", "image"], ["mse"])
    spec.node("rate", "RateLoss", likelihoods + ["image"], ["bpp"])


def four_stages(latent):
    """bmshj2018's four 5x5/2 stages, 128 channels between and `latent` in y."""
    return [(128, 5, 2)] * 3 + [(latent, 5, 2)]
