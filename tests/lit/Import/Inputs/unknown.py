# Generates unknown.log (torch 2.13.0, CPython 3.11): constructs Guard IR has
# no kind for (TUPLE_ITERATOR_LEN, TupleIteratorGetItemAccessor).
#   TORCH_LOGS=guards python unknown.py > unknown.log 2>&1
import torch, weakref, dataclasses
torch._logging.set_logs(guards=True)

class K:
    cls_attr = 4
    def __init__(self): self.v = 1.0

@dataclasses.dataclass
class DC:
    a: int
    b: float

k = K()
target = torch.nn.Linear(2, 2)
wr = weakref.ref(target)

@torch.compile(backend="eager")
def f(x, o, s, it, dc, g):
    y = x * o.cls_attr
    if hasattr(o, "missing"):
        y = y + 1
    if x.grad is None:
        y = y + 2
    for e in s:
        y = y + e
    y = y + next(it)
    y = y + dc.a + dc.b
    m = wr()
    if m is not None:
        y = y + m.weight.sum()
    return y + g.float().sum()

g = torch.ones(2, requires_grad=True)
f(torch.randn(2), k, {3}, iter((1, 2)), DC(1, 2.0), torch.arange(2))
