# Generates recorded.log and recorded.gir (torch 2.13.0): the TORCH_LOGS=guards log
# and the recorder's Guard IR of the same compile unit, from one run:
#   PYTHONPATH=. python -m guardjit export recorded:make --out rec --backend eager > recorded.log 2>&1
import torch, torch.nn as nn
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
def make():
    torch._logging.set_logs(guards=True)
    torch.manual_seed(0)
    return M(), (torch.randn(2, 4), [torch.randn(3), torch.randn(3)], None, {"a": 2.0, "b": 3}, (1, torch.randn(3)))
