"""Exports greedy_decoder_jit_script.onnx (run with a torch install): a torch.jit.script greedy decoder whose loop
exits early on token 14 and whose token sequence grows by a Concat each iteration."""
import torch, sys
class Greedy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.emb = torch.nn.Parameter(torch.randn(16, 8, generator=g))
        self.out = torch.nn.Parameter(torch.randn(8, 16, generator=g))
    def forward(self, start: torch.Tensor, max_len: torch.Tensor):
        tokens = start
        for _ in range(int(max_len)):
            last = tokens[:, -1]
            h = torch.tanh(self.emb[last])
            nxt = torch.argmax(h @ self.out, dim=-1, keepdim=True)
            tokens = torch.cat([tokens, nxt], dim=1)
            if bool(nxt[0, 0] == 14):
                break
        return tokens
m = torch.jit.script(Greedy())
torch.onnx.export(m, (torch.tensor([[1]]), torch.tensor(10)), sys.argv[1], input_names=["start", "max_len"],
                  output_names=["tokens"], dynamic_axes={"tokens": {1: "n"}}, opset_version=17, dynamo=False)
