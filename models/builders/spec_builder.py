"""What the spec builders in this folder share: a list of graph nodes
built in order, the convolutions and activations they use most, the residual
and attention blocks of the bundled specs, and the printer that writes a spec
as models/specs/*.json are laid out (one node a line)."""
import json


class SpecBuilder:
    def __init__(self):
        self.nodes = []

    def node(self, name, kind, inputs, outputs, **params):
        """Appends a node; returns its first output's name."""
        entry = {"name": name, "type": kind, "inputs": inputs, "outputs": outputs}
        if params:
            entry["params"] = params
        self.nodes.append(entry)
        return outputs[0]

    def conv(self, name, x, out, kernel, stride=1, transposed=False, output=None):
        """A "same"-padded Conv2d (or ConvTranspose2d, output_padding stride - 1); its output is
        named output, or name + "_out"."""
        params = dict(out_channels=out, kernel=kernel, stride=stride, padding=kernel // 2)
        if transposed:
            params["output_padding"] = stride - 1
        kind = "ConvTranspose2d" if transposed else "Conv2d"
        return self.node(name, kind, [x], [output or name + "_out"], **params)

    def activation(self, kind, name, x):
        return self.node(name, kind, [x], [name + "_out"])

    def add(self, name, a, b, output=None):
        return self.node(name, "Add", [a, b], [output or name + "_out"])

    def subpel(self, name, x, out, r=2, output=None):
        """Sub-pixel upsampling by r: a 3x3 convolution to out * r^2 channels, then PixelShuffle(r)."""
        y = self.conv(name + "_conv", x, out * r * r, 3)
        return self.node(name + "_shuffle", "PixelShuffle", [y], [output or name + "_out"], upscale_factor=r)

    def residual_block(self, name, x, channels, output=None):
        """x + leaky(conv3x3(leaky(conv3x3(x)))): CompressAI's ResidualBlock."""
        y = self.activation("LeakyReLU", name + "_act0", self.conv(name + "_conv0", x, channels, 3))
        y = self.activation("LeakyReLU", name + "_act1", self.conv(name + "_conv1", y, channels, 3))
        return self.add(name + "_add", x, y, output)

    def residual_block_with_stride(self, name, x, out, stride=2):
        """GDN(conv3x3(leaky(conv3x3/stride(x)))) + conv1x1/stride(x): CompressAI's ResidualBlockWithStride."""
        y = self.activation("LeakyReLU", name + "_act", self.conv(name + "_conv0", x, out, 3, stride))
        y = self.node(name + "_gdn", "GDN", [self.conv(name + "_conv1", y, out, 3)], [name + "_gdn_out"])
        return self.add(name + "_add", y, self.conv(name + "_skip", x, out, 1, stride))

    def residual_block_upsample(self, name, x, out):
        """IGDN(conv3x3(leaky(subpel(x)))) + subpel(x): CompressAI's ResidualBlockUpsample (r = 2)."""
        y = self.activation("LeakyReLU", name + "_act", self.subpel(name + "_up", x, out))
        y = self.node(name + "_igdn", "IGDN", [self.conv(name + "_conv", y, out, 3)], [name + "_igdn_out"])
        return self.add(name + "_add", y, self.subpel(name + "_skip", x, out))

    def residual_unit(self, name, x, channels, output=None):
        """relu(x + conv1x1(relu(conv3x3(relu(conv1x1(x)))))), channels / 2 inside: the residual unit of
        Cheng et al.'s simplified attention module (CompressAI's AttentionBlock)."""
        y = self.activation("ReLU", name + "_act0", self.conv(name + "_conv0", x, channels // 2, 1))
        y = self.activation("ReLU", name + "_act1", self.conv(name + "_conv1", y, channels // 2, 3))
        y = self.conv(name + "_conv2", y, channels, 1)
        return self.node(name + "_act2", "ReLU", [self.add(name + "_add", x, y)], [output or name + "_act2_out"])

    def attention_block(self, name, x, channels, output=None):
        """x + trunk(x) * sigmoid(mask(x)): Cheng et al. 2020's simplified attention module, the trunk three
        residual units, the mask three residual units and a 1x1 convolution."""
        trunk = x
        for k in range(3):
            trunk = self.residual_unit(f"{name}_trunk{k}", trunk, channels)
        mask = x
        for k in range(3):
            mask = self.residual_unit(f"{name}_mask{k}", mask, channels)
        mask = self.node(name + "_sigmoid", "Sigmoid", [self.conv(name + "_mask_conv", mask, channels, 1)],
                         [name + "_weights"])
        gated = self.node(name + "_mul", "Mul", [trunk, mask], [name + "_gated"])
        return self.add(name + "_add", x, gated, output)

    def residual_bottleneck(self, name, x, channels, output=None):
        """x + conv1x1(relu(conv3x3(relu(conv1x1(x))))), channels / 2 inside: ELIC's residual bottleneck
        block (He et al. 2022)."""
        y = self.activation("ReLU", name + "_act0", self.conv(name + "_conv0", x, channels // 2, 1))
        y = self.activation("ReLU", name + "_act1", self.conv(name + "_conv1", y, channels // 2, 3))
        return self.add(name + "_add", x, self.conv(name + "_conv2", y, channels, 1), output)

    def window_attention_block(self, name, x, channels, window, heads, shift=0, mlp_ratio=4, output=None):
        """A Swin transformer block on x [N, channels, H, W] (H, W multiples of window), as in TCM:
            h = x + proj(W-MSA(LN(x))),   y = h + fc2(GELU(fc1(LN(h))))
        LN the channels-last LayerNorm; the multi-head self-attention softmax(q k^T / sqrt(d)) v within
        each window x window window, after a cyclic shift by -shift (shifted windows, in alternate blocks);
        d = channels / heads; q, k, v one 1x1 convolution to 3 * channels (Linear(C, 3C)) split in three;
        proj a 1x1 convolution, fc1 and fc2 1x1 convolutions through mlp_ratio * channels. Unlike Swin it
        has no relative position bias and no mask across the seams of shifted windows."""
        d = channels // heads
        windows = dict(window=window, shift=shift)
        n1 = self.node(name + "_norm1", "LayerNorm", [x], [name + "_norm1_out"])
        qkv = self.conv(name + "_qkv", n1, 3 * channels, 1)
        q, k, v = (f"{name}_{part}" for part in "qkv")
        self.node(name + "_qkv_split", "Split", [qkv], [q, k, v], sizes=[channels] * 3)
        q_w, k_w, v_w = (self.node(f"{t}_windows", "WindowPartition", [t], [f"{t}_w"], heads=heads, **windows)
                         for t in (q, k, v))
        scores = self.node(name + "_scores", "MatMul", [q_w, k_w], [name + "_scores_out"], transpose_b=True,
                           scale=d ** -0.5)
        weights = self.node(name + "_softmax", "Softmax", [scores], [name + "_weights"], axis=-1)
        attended = self.node(name + "_values", "MatMul", [weights, v_w], [name + "_attended_w"])
        attended = self.node(name + "_reverse", "WindowReverse", [attended, n1], [name + "_attended"], **windows)
        h = self.add(name + "_attn_add", x, self.conv(name + "_proj", attended, channels, 1))
        n2 = self.node(name + "_norm2", "LayerNorm", [h], [name + "_norm2_out"])
        m = self.activation("GELU", name + "_gelu", self.conv(name + "_fc1", n2, mlp_ratio * channels, 1))
        return self.add(name + "_mlp_add", h, self.conv(name + "_fc2", m, channels, 1), output)

    def conv_transformer_block(self, name, x, channels, window, head_dim, shift=0, output=None):
        """TCM's mixed convolution-transformer block (Liu, Sun, Katto, CVPR 2023) on x [N, channels, H, W]:
        a 1x1 convolution, its channels split in halves, a residual block on the first half and a window
        attention block (heads = channels / 2 / head_dim) on the second, joined, a 1x1 convolution, plus x."""
        half = channels // 2
        mixed = self.conv(name + "_in", x, channels, 1)
        c, t = name + "_conv_x", name + "_trans_x"
        self.node(name + "_split", "Split", [mixed], [c, t], sizes=[half, half])
        c = self.residual_block(name + "_res", c, half)
        t = self.window_attention_block(name + "_swin", t, half, window, half // head_dim, shift)
        joined = self.node(name + "_concat", "Concat", [c, t], [name + "_joined"])
        return self.add(name + "_add", x, self.conv(name + "_out", joined, channels, 1), output)

    def print_spec(self, name, description, codec=None):
        """Prints the spec; `codec`, when given, is its codec section (one line)."""
        print("{")
        print(f'  "name": {json.dumps(name)},')
        print(f'  "description": {json.dumps(description)},')
        print('  "inputs": ["image"],')
        if codec:
            print(f'  "codec": {json.dumps(codec)},')
        print('  "nodes": [')
        print(",\n".join("    " + json.dumps(n) for n in self.nodes))
        print("  ]")
        print("}")
