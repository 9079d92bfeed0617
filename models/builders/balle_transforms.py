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


def mean_scale_hyperprior(spec, hyper, latent, context=None):
    """mbt2018-mean's hyperprior on y of `latent` channels: hyper-analysis y -> conv 3x3/1 -> LeakyReLU ->
    conv 5x5/2 -> LeakyReLU -> conv 5x5/2 = z (`hyper` channels), z_hat under a factorized entropy model,
    hyper-synthesis to the scales and means of y (transposed 5x5/2 twice, then 3x3 to 2 * latent), y_hat
    quantised around the means under the Gaussian conditional ("likelihoods", "z_likelihoods"). With a
    `context`, a function of (spec, the hyper-synthesis output) giving the blob the scales and means are
    split from, the hyper-synthesis gives "hyper_params" and the context model the "gaussian_params"."""

    def leaky(name, x):
        return spec.node(name + "_act", "LeakyReLU", [x], [name + "_leaky"])

    x = leaky("h_a0", spec.conv("h_a0", "y", hyper, 3))
    x = leaky("h_a1", spec.conv("h_a1", x, hyper, 5, 2))
    spec.conv("h_a2", x, hyper, 5, 2, output="z")
    spec.node("hyper_quantizer", "UniformNoise", ["z"], ["z_hat"])
    factorized_entropy_model(spec, "hyper_entropy_model", "z_hat", "z_likelihoods")
    x = leaky("h_s0", spec.conv("h_s0", "z_hat", latent, 5, 2, transposed=True))
    x = leaky("h_s1", spec.conv("h_s1", x, latent * 3 // 2, 5, 2, transposed=True))
    params = spec.conv("h_s2", x, 2 * latent, 3, output="hyper_params" if context else "gaussian_params")
    if context:
        params = context(spec, params)
    spec.node("gaussian_params_split", "Split", [params], ["scales", "means"], sizes=[latent, latent])
    spec.node("quantizer", "QuantizeAroundMean", ["y", "means"], ["y_hat"], synthesis="noise")
    spec.node("gaussian_conditional", "GaussianConditional", ["y_hat", "scales", "means"], ["likelihoods"],
              **GAUSSIAN)


def checkerboard_context(spec, latent, hyper_params):
    """He et al. 2021's checkerboard context model on y of `latent` channels, in the mean-scale hyperprior: the
    rounded latent (UniformNoise: noise in training, rounding in eval) kept at the anchors (h + w even), a 5x5
    convolution to 2 * latent channels kept at the other positions (the context, 0 at the anchors), and the
    entropy parameters, 1x1 convolutions of [hyper_params, context] through 10/3 and 8/3 * latent channels
    with LeakyReLU between, to the 2 * latent channels the scales and means are split from (mbt2018's shape).
    Returns that blob, "gaussian_params"."""

    def leaky(name, x):
        return spec.node(name + "_act", "LeakyReLU", [x], [name + "_leaky"])

    spec.node("context_quantizer", "UniformNoise", ["y"], ["y_context"])
    spec.node("anchor_mask", "CheckerboardMask", ["y_context"], ["y_anchors"], keep="even")
    x = spec.conv("context_prediction", "y_anchors", 2 * latent, 5)
    spec.node("context_mask", "CheckerboardMask", [x], ["context"], keep="odd")
    x = spec.node("entropy_parameters_join", "Concat", [hyper_params, "context"], ["entropy_parameters_in"])
    x = leaky("entropy_parameters0", spec.conv("entropy_parameters0", x, latent * 10 // 3, 1))
    x = leaky("entropy_parameters1", spec.conv("entropy_parameters1", x, latent * 8 // 3, 1))
    return spec.conv("entropy_parameters2", x, 2 * latent, 1, output="gaussian_params")


def autoregressive_context(spec, latent, hyper_params):
    """Minnen et al. 2018's context model on y of `latent` channels, in the mean-scale hyperprior: the rounded
    latent (UniformNoise: noise in training, rounding in eval), a 5x5 convolution with the raster-scan mask "A"
    to 2 * latent channels (the context: each position reads only the positions before it), and the entropy
    parameters, 1x1 convolutions of [hyper_params, context] as checkerboard_context's. Returns
    "gaussian_params"."""

    def leaky(name, x):
        return spec.node(name + "_act", "LeakyReLU", [x], [name + "_leaky"])

    spec.node("context_quantizer", "UniformNoise", ["y"], ["y_context"])
    spec.node("context_prediction", "Conv2d", ["y_context"], ["context"], out_channels=2 * latent, kernel=5,
              stride=1, padding=2, mask="A")
    x = spec.node("entropy_parameters_join", "Concat", [hyper_params, "context"], ["entropy_parameters_in"])
    x = leaky("entropy_parameters0", spec.conv("entropy_parameters0", x, latent * 10 // 3, 1))
    x = leaky("entropy_parameters1", spec.conv("entropy_parameters1", x, latent * 8 // 3, 1))
    return spec.conv("entropy_parameters2", x, 2 * latent, 1, output="gaussian_params")


# The codec section of an autoregressive mean-scale hyperprior with the node names above.
AUTOREGRESSIVE_CODEC = {
    "type": "hyperprior",
    "z": {"type": "factorized", "entropy_model": "hyper_entropy_model"},
    "y": {"type": "autoregressive", "conditional": "gaussian_conditional", "quantizer": "quantizer",
          "context_input": "context_quantizer", "context": "context_prediction"},
}


# The codec section of a checkerboard mean-scale hyperprior with the node names above.
CHECKERBOARD_CODEC = {
    "type": "hyperprior",
    "z": {"type": "factorized", "entropy_model": "hyper_entropy_model"},
    "y": {"type": "checkerboard", "conditional": "gaussian_conditional", "quantizer": "quantizer",
          "context_input": "context_quantizer", "anchor_mask": "anchor_mask", "context_mask": "context_mask"},
}


def grouped_checkerboard_context(spec, sizes, hyper_params, spatial_kernel=5, channel_hidden=(224, 128),
                                 aggregation_hidden=(640, 512)):
    """He et al. 2022's space-channel context model (ELIC) on y, cut into groups of `sizes` channels (Split
    "y_split" into y0, y1, ...), each coded as a checkerboard. Group k: its rounded latent (UniformNoise of
    y<k>) kept at the anchors, a `spatial_kernel` convolution to 2 C_k kept at the other positions (the
    spatial context); for k > 0 the channel context, three 5x5 convolutions (ReLU between, `channel_hidden`
    channels) of the decoded groups before k to 2 C_k; the parameter aggregation, 1x1 convolutions of
    [hyper_params, spatial context, channel context] through `aggregation_hidden` channels (ReLU between)
    to 2 C_k, split into its scales and means; y_hat<k>, y_rounded<k> = QuantizeAroundMean(y<k>, means)
    (straight-through rounding for the synthesis and the later groups). Then y_hat, the scales and the means
    joined, the Gaussian conditional ("likelihoods"), and "y_decoded" (the rounded groups joined) for the
    synthesis. Returns the codec section's channel_groups latent codec."""

    def relu(name, x):
        return spec.activation("ReLU", name, x)

    spec.node("y_split", "Split", ["y"], [f"y{k}" for k in range(len(sizes))], sizes=list(sizes))
    groups, scales, means = [], [], []
    for k, c in enumerate(sizes):
        g = f"group{k}"
        spec.node(g + "_context_quantizer", "UniformNoise", [f"y{k}"], [f"y_context{k}"])
        spec.node(g + "_anchor_mask", "CheckerboardMask", [f"y_context{k}"], [f"y_anchors{k}"], keep="even")
        x = spec.conv(g + "_spatial", f"y_anchors{k}", 2 * c, spatial_kernel)
        spec.node(g + "_context_mask", "CheckerboardMask", [x], [g + "_spatial_context"], keep="odd")
        parts = [hyper_params, g + "_spatial_context"]
        if k > 0:
            decoded = [f"y_rounded{j}" for j in range(k)]
            x = decoded[0] if k == 1 else spec.node(g + "_channel_join", "Concat", decoded, [g + "_channel_in"])
            for i, hidden in enumerate(channel_hidden):
                x = relu(f"{g}_channel{i}_act", spec.conv(f"{g}_channel{i}", x, hidden, 5))
            parts.append(spec.conv(f"{g}_channel{len(channel_hidden)}", x, 2 * c, 5,
                                   output=g + "_channel_context"))
        x = spec.node(g + "_aggregation_join", "Concat", parts, [g + "_aggregation_in"])
        for i, hidden in enumerate(aggregation_hidden):
            x = relu(f"{g}_aggregation{i}_act", spec.conv(f"{g}_aggregation{i}", x, hidden, 1))
        x = spec.conv(f"{g}_aggregation{len(aggregation_hidden)}", x, 2 * c, 1, output=g + "_params")
        spec.node(g + "_params_split", "Split", [x], [f"scales{k}", f"means{k}"], sizes=[c, c])
        spec.node(g + "_quantizer", "QuantizeAroundMean", [f"y{k}", f"means{k}"], [f"y_hat{k}", f"y_rounded{k}"],
                  synthesis="straight_through")
        groups.append({"quantizer": g + "_quantizer", "context_input": g + "_context_quantizer",
                       "anchor_mask": g + "_anchor_mask", "context_mask": g + "_context_mask"})
        scales.append(f"scales{k}")
        means.append(f"means{k}")
    spec.node("y_hat_join", "Concat", [f"y_hat{k}" for k in range(len(sizes))], ["y_hat"])
    spec.node("scales_join", "Concat", scales, ["scales"])
    spec.node("means_join", "Concat", means, ["means"])
    spec.node("gaussian_conditional", "GaussianConditional", ["y_hat", "scales", "means"], ["likelihoods"],
              **GAUSSIAN)
    spec.node("y_decoded_join", "Concat", [f"y_rounded{k}" for k in range(len(sizes))], ["y_decoded"])
    return {"type": "channel_groups", "conditional": "gaussian_conditional", "decoded": "y_decoded_join",
            "groups": groups}


def losses(spec, likelihoods):
    """lambda * 255^2 * mse + bpp: the MSE of x_hat and the bits of every likelihood given."""
    spec.node("distortion", "MSELoss", ["x_hat", "image"], ["mse"])
    spec.node("rate", "RateLoss", likelihoods + ["image"], ["bpp"])


def four_stages(latent, hidden=128):
    """bmshj2018's four 5x5/2 stages, `hidden` channels between and `latent` in y."""
    return [(hidden, 5, 2)] * 3 + [(latent, 5, 2)]
