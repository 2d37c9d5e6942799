# Generates torch-2.14.1.log (torch 2.14.1, CPython 3.11):
#   TORCH_LOGS=guards python torch-2.14.1.py > torch-2.14.1.log 2>&1
# Unit 0/0 is module.py's model (an nn.Module with a Linear child, a dict, a
# tuple, a list, a None, a global), whose log reads as under 2.13.0. Unit 1/0
# has what 2.14.1 prints anew: a ContextVar read (a PythonLambdaGuardAccessor
# `.get()`), a COW check (COW_TENSOR_MATCH, a LAMBDA_GUARD), the lengths of a
# set and a frozenset (`set.__len__(...)`), set items (`___set_getitem(...)`)
# and objects passed twice (OBJECT_ALIASING, now that
# use_lamba_guard_for_object_aliasing is False by default).
import contextvars
import torch, torch.nn as nn
torch._logging.set_logs(guards=True)
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.scale = 0.5
        self.flag = True
    def forward(self, x, y, n, d, t):
        z = self.lin(x) * self.scale
        if self.flag:
            z = z + y[0] + y[1]
        if n is None:
            z = z + 1
        return z * d["a"] + t[1] + GLOBAL_C
GLOBAL_C = 3
m = M()
f = torch.compile(m, backend="eager")
f(torch.randn(2, 4), [torch.randn(3), torch.randn(3)], None, {"a": 2.0, "b": 3}, (1, torch.randn(3)))

CV = contextvars.ContextVar("scale", default=2.0)
class Box:
    def __init__(self, k):
        self.k = k
@torch.compile(backend="eager")
def g(x, s, fs, e, a, b):
    y = x * CV.get()
    if torch._C._is_cow_tensor(x):
        y = y + 1
    for o in s:
        y = y + o.k
    if not e:
        y = y + 1
    return y * len(fs) + a.k + b.k
b1, b2 = Box(1.0), Box(2.0)
g(torch.randn(3), {b1, b2}, frozenset([b1]), [], b2, b2)
