package ckpt

import (
	osexec "os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/prism-hpc/prism/internal/torchtest"
)

// TestSizeOfAdamCheckpoint sizes the checkpoint of 24 x Linear(1024, 1024)
// fp32 with torch.optim.Adam, the model prism's old 16-bytes-per-parameter
// Adam overstated by a third: prism's torch.save file must be the size
// real torch.save writes for the same state (prism's names are
// ModuleList's "layers.N.weight"; nn.Sequential's shorter "N.weight" make
// torch's file 512 bytes smaller). Real torch computes its figure here.
func TestSizeOfAdamCheckpoint(t *testing.T) {
	m := mustBuild(t, "synthetic", Synthetic(24, 1024, 1024, F32), OptAdam, 1)
	// torch.save into a stream (how the script below measures without
	// writing 300 MB) names the archive "archive", as a file archive.pt.
	l := NewTorchState(m.State(Torch113, false), 1, "archive.pt", Torch113)
	l.Build(0, false)
	got := l.Files[0].Size
	// Tensor bytes: 24 x (1024x1024 + 1024) fp32 parameters, 2 moments
	// each, 48 float32 steps.
	const params = 24 * (1024*1024 + 1024)
	if m.TensorBytes() != params*4*3+48*4 {
		t.Fatalf("tensor bytes %d, want %d", m.TensorBytes(), params*4*3+48*4)
	}
	t.Logf("prism: %d bytes, %d of them tensors", got, m.TensorBytes())
	py := torchtest.Python(t)
	script := `
import io, torch, torch.nn as nn
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(1024, 1024) for _ in range(24))
for kind in ("modulelist", "sequential"):
    model = Net() if kind == "modulelist" else nn.Sequential(*[nn.Linear(1024, 1024) for _ in range(24)])
    opt = torch.optim.Adam(model.parameters())
    for p in model.parameters(): p.grad = torch.ones_like(p)
    opt.step()
    b = io.BytesIO()
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, b)
    print(kind, len(b.getvalue()))
`
	raw, err := osexec.Command(py, "-c", script).CombinedOutput()
	out := string(raw)
	if err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	sizes := map[string]int64{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		n, _ := strconv.ParseInt(f[1], 10, 64)
		sizes[f[0]] = n
	}
	if want := sizes["modulelist"]; got != want {
		t.Errorf("prism's file is %d bytes, torch.save's %d", got, want)
	}
	t.Logf("torch: %d bytes with ModuleList names, %d with nn.Sequential's", sizes["modulelist"], sizes["sequential"])
}
