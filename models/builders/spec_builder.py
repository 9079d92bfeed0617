"""What the spec builders in this folder share: a list of graph nodes
built in order, the convolutions and activations they use most, and the
printer that writes a spec as models/specs/*.json are laid out (one node a line)."""
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

    def print_spec(self, name, description):
        print("{")
        print(f'  "name": {json.dumps(name)},')
        print(f'  "description": {json.dumps(description)},')
        print('  "inputs": ["image"],')
        print('  "nodes": [')
        print(",\n".join("    " + json.dumps(n) for n in self.nodes))
        print("  ]")
        print("}")
