"""PyTorch's strongest setting for one training step, the "strongest" setting
of torch_bench.py: the forward and loss under
torch.compile(mode="max-autotune-no-cudagraphs"), bf16 autocast, channels_last
tensors, Adam made with capturable=True (fused by default), and the whole step
(zeroing of the gradients, forward, loss, backward, Adam) recorded once as ONE
CUDA graph and replayed. A replay launches the whole step with one call, so the
step's wall rate is its GPU rate: the GPU never waits for Python.

Why max-autotune-no-cudagraphs and a capture by hand rather than
mode="max-autotune": both pick the same kernels (Inductor benchmarks its Triton
templates against cuBLAS and cuDNN while compiling), but "max-autotune" also
wraps each compiled region in Inductor's own CUDA graphs (cudagraph trees): the
compiled forward and the compiled backward become separate graphs, launched from
Python one after the other, and the optimiser's step is outside them (or a
third compiled region with a graph of its own). That never records forward,
backward and Adam as one graph, and Inductor's graphs cannot be recorded inside
a capture of ours. So the model is compiled without Inductor's graphs and the
step is recorded as PyTorch's CUDA-graph notes record a whole network
("whole-network capture"):
  1. warm-up steps on a side stream (the first compiles and autotunes; later
     ones let cuDNN, cuBLAS and Adam's state settle);
  2. the gradients stay allocated (zero_grad(set_to_none=False)), so the graph
     zeroes them in place and backward accumulates into fixed addresses;
  3. Adam with capturable=True keeps its step counts on the GPU, so the
     replayed update advances them;
  4. capture on the same side stream (torch.cuda.graph(graph, stream=...));
  5. before each replay the next batch is copied into the static input tensors.
Autocast runs with cache_enabled=False, as the CUDA-graph notes ask of autocast
inside a capture.

Everything up to the capture (build, warm-up step) also runs on the CPU without
compiling (compile_mode=None), which is what test_torch_strongest.py checks.
"""
import torch

# The compile mode of the strongest setting: max-autotune's kernel choice,
# without the CUDA graphs of its own that would split the step (see above).
STRONGEST_COMPILE_MODE = "max-autotune-no-cudagraphs"
# Adam implementations the strongest setting can use: "fused" (one kernel per
# group of tensors, the fastest) or "foreach" (PyTorch's default on CUDA).
ADAM_IMPLEMENTATIONS = ("fused", "foreach")


def capturable_adam(params, implementation="fused", lr=1e-4):
    """torch.optim.Adam with capturable=True: its step counts are device tensors
    and its update has no host synchronisation, so a CUDA graph may record it."""
    if implementation not in ADAM_IMPLEMENTATIONS:
        raise ValueError(f"unknown Adam implementation '{implementation}' (choose from "
                         + ", ".join(ADAM_IMPLEMENTATIONS) + ")")
    fused = implementation == "fused"
    return torch.optim.Adam(params, lr=lr, capturable=True, fused=fused, foreach=None if fused else True)


class WholeStepGraph:
    """One training step of `loss_module` (a module whose forward(**inputs)
    returns the scalar loss) with every parameter of it trained by capturable
    Adam, recorded as one CUDA graph.

      graph = WholeStepGraph(loss_module, inputs)   # inputs: the static tensors
      graph.warm_up(3)     # eager steps on the side stream (compiles)
      graph.record()       # capture
      graph.replay()       # copy the next batch in, launch the step

    `compile_mode=None` leaves the module uncompiled (CPU tests)."""

    def __init__(self, loss_module, inputs, compile_mode=STRONGEST_COMPILE_MODE, adam="fused"):
        self.params = [p for p in loss_module.parameters() if p.requires_grad]
        if not self.params:
            raise ValueError("the module has no trainable parameters")
        self.device = self.params[0].device
        self.optimizer = capturable_adam(self.params, adam)
        self.run = loss_module if compile_mode is None else torch.compile(loss_module, mode=compile_mode)
        self.inputs = inputs  # the static tensors the graph reads
        # The next batch, copied into `inputs` before each replay as a training
        # loop would; the same data every time, which changes no kernel's work.
        self.next_batch = {name: t.clone() for name, t in inputs.items()}
        self.stream = torch.cuda.Stream() if self.device.type == "cuda" else None
        self.graph = None
        self.loss = None  # the loss tensor the recorded step writes

    def step(self):
        """One step as it is recorded: zero the gradients in place, forward and
        loss under bf16 autocast, backward, Adam. Returns the loss."""
        self.optimizer.zero_grad(set_to_none=False)
        with torch.autocast(self.device.type, dtype=torch.bfloat16, cache_enabled=False):
            loss = self.run(**self.inputs)
        loss.backward()
        self.optimizer.step()
        return loss

    def copy_next_batch(self):
        for name, t in self.inputs.items():
            t.copy_(self.next_batch[name], non_blocking=True)

    def warm_up(self, steps):
        """`steps` eager steps, on the side stream where the graph is recorded:
        the autograd engine runs backward on the forward's stream, and cuBLAS
        and cuDNN set up their state for that stream before the capture."""
        if self.stream is None:
            for _ in range(steps):
                self.loss = self.step()
            return
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            for _ in range(steps):
                self.loss = self.step()
        torch.cuda.current_stream().wait_stream(self.stream)
        torch.cuda.synchronize()

    def record(self):
        """Records one step into a CUDA graph (no kernel runs during the capture)."""
        if self.stream is None:
            raise RuntimeError("a CUDA graph needs the module on a CUDA device, not " + str(self.device))
        if any(p.grad is None for p in self.params):
            raise RuntimeError("warm up before recording: every parameter needs its gradient allocated")
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, stream=self.stream):
            self.loss = self.step()

    def replay(self):
        self.copy_next_batch()
        self.graph.replay()

    def adam_steps(self):
        """Adam's step count of the first parameter (a device tensor under capturable=True)."""
        return int(self.optimizer.state[self.params[0]]["step"].item())

    def check_replay_trains(self):
        """Replays once and checks that the recorded step is a training step:
        Adam's step count advanced by one, some parameter moved and the loss is
        finite. Raises RuntimeError naming what is missing."""
        before = [p.detach().clone() for p in self.params]
        steps = self.adam_steps()
        self.replay()
        torch.cuda.synchronize()
        if self.adam_steps() != steps + 1:
            raise RuntimeError(f"a replay took Adam from step {steps} to {self.adam_steps()}, not {steps + 1}: "
                               "the optimiser's step is not in the graph")
        if all(torch.equal(b, p) for b, p in zip(before, self.params)):
            raise RuntimeError("a replay changed no parameter: the update is not in the graph")
        if not torch.isfinite(self.loss).item():
            raise RuntimeError(f"the replayed step's loss is {self.loss.item()}")

    def time_replays(self, warmup, steps):
        """Milliseconds per step: CUDA events around `steps` replays (each after
        its batch copy), after `warmup` untimed ones."""
        for _ in range(warmup):
            self.replay()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(steps):
            self.replay()
        stop.record()
        stop.synchronize()
        return start.elapsed_time(stop) / steps
