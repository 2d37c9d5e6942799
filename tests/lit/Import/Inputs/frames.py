# Generates frames.log (torch 2.13.0, CPython 3.11): five compile units, a
# recompile with a dynamic dim, a graph break, dynamic=True. The committed log
# keeps frames 0/1 to 3/0 (grep -v "\] \[0/0\]\|\] \[4/0\]") to stay small.
#   TORCH_LOGS=guards python frames.py > frames.log 2>&1
import torch, torch.nn as nn, math, weakref, collections
torch._logging.set_logs(guards=True)

class Cfg:
    def __init__(self):
        self.alpha = 2.0
        self.mode = "fast"

def helper(a, k=3, *, scale=1.5):
    return a * k * scale

def outer():
    bias = 0.25
    def inner(x):
        return x + bias
    return inner
closure_fn = outer()
cfg = Cfg()
nanv = float("nan")

@torch.compile(backend="eager")
def f(x, d, fn, c, lst, s):
    y = helper(x) + fn(x)
    for k, v in d.items():
        y = y + v
    if c.mode == "fast":
        y = y * c.alpha
    y = y + lst[-1] + s
    if math.isnan(nanv):
        y = y - 1
    if isinstance(c, Cfg):
        y = y + 2
    return y.sum()

x = torch.randn(3, 2)
f(x, {"p": 1.0, "q": torch.ones(2)}, closure_fn, cfg, [1, 2, 3], 5)
# recompile: new shape -> dynamic
f(torch.randn(5, 2), {"p": 1.0, "q": torch.ones(2)}, closure_fn, cfg, [1, 2, 3], 5)

@torch.compile(backend="eager", dynamic=True)
def g(x, n):
    if x.shape[0] > 2:
        return x * n
    return x
g(torch.randn(4, 3), 2)

# graph break -> second frame
@torch.compile(backend="eager")
def h(x):
    y = x + 1
    print("break")
    return y * 2
h(torch.randn(2))

class Sub(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("buf", torch.zeros(2))
        self.ws = nn.ModuleList([nn.Linear(2, 2) for _ in range(2)])
    def forward(self, x):
        for w in self.ws:
            x = w(x)
        return x + self.buf
m = torch.compile(Sub(), backend="eager")
m(torch.randn(1, 2))
