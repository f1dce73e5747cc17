import torch, time
n = 130 * 128256
g = torch.empty(n, dtype=torch.float32, device="cuda")
for pin in (False, True):
    h = torch.empty(n, dtype=torch.float32, pin_memory=pin)
    for _ in range(3): h.copy_(g); torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(10): h.copy_(g); torch.cuda.synchronize()
    dt = (time.perf_counter() - t) / 10
    print(f"D2H {n*4/1e6:.0f} MB pinned={pin}: {dt*1e3:.2f} ms = {n*4/dt/1e9:.1f} GB/s")
import numpy as np
a = np.random.rand(n).astype(np.float32)
t = time.perf_counter(); b = np.exp(a); dt = time.perf_counter() - t
print(f"numpy exp of {n} floats: {dt*1e3:.1f} ms")
