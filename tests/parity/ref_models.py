"""Plain PyTorch twins of scaletrain's mlp, cnn and gpt, for torch_parity.py.

Parameter names and shapes are scaletrain's checkpoint names: the mlp and cnn
use nn.Linear / nn.Conv2d / nn.BatchNorm2d layouts, the gpt follows Hugging
Face GPT-2 (wte, wpe, h.N.ln_1, h.N.attn.c_attn with an (in, out) "Conv1D"
weight used as x @ W + b, ..., ln_f, output layer tied to wte). Inputs are
NHWC images or (B, T) tokens, as scaletrain takes them; the cnn permutes to
NCHW itself. Not here: dropout (parity runs with p = 0) or any training loop.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

# Mirrors pm_config in tests/parity_models.h; change both together.
MODEL_CONFIGS = {
    "mlp": dict(image=(28, 28, 1), hidden=(64, 32), classes=10),
    "cnn": dict(image=(12, 12, 1), channels=(8, 16), pool=(0, 1), kernel=3, classes=10),
    "gpt": dict(vocab=64, block=16, n_layer=2, n_head=2, n_embd=32),
}


def causal_attention(qkv, n_head):
    """nanoGPT's attention core: qkv (B, T, 3C) -> (B, T, C)."""
    B, T, C3 = qkv.shape
    C = C3 // 3
    q, k, v = qkv.split(C, dim=2)
    q, k, v = (t.view(B, T, n_head, C // n_head).transpose(1, 2) for t in (q, k, v))
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // n_head))
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool, device=qkv.device))
    att = att.masked_fill(~mask, float("-inf"))
    att = F.softmax(att, dim=-1)
    return (att @ v).transpose(1, 2).contiguous().view(B, T, C)


class Kinks(nn.Module):
    """How close the forward passes since reset_margin() came to a kink: the
    smallest |input| of a ReLU and the smallest gap between the two largest
    values of a max-pool window. fp32 rounding (~1e-7 here) can send an input
    that close to a kink the other way, which changes a gradient by O(1);
    callers redraw such inputs (KINK_MARGIN)."""

    margin = math.inf

    def reset_margin(self):
        self.margin = math.inf

    def relu(self, x):
        self.margin = min(self.margin, x.detach().abs().min().item())
        return F.relu(x)

    def max_pool2d(self, x, k):  # x (B, C, H, W)
        B, C = x.shape[:2]
        windows = F.unfold(x.detach(), k, stride=k).view(B, C, k * k, -1)
        top2 = windows.topk(2, dim=2).values
        gap = top2[:, :, 0] - top2[:, :, 1]
        gap[top2[:, :, 0] == 0] = math.inf  # a tie of ReLU zeros passes no gradient either way
        self.margin = min(self.margin, gap.min().item())
        return F.max_pool2d(x, k, k)


KINK_MARGIN = 1e-5


class MLP(Kinks):
    def __init__(self, image, hidden, classes):
        super().__init__()
        dims = [image[0] * image[1] * image[2], *hidden]
        self.fc = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.head = nn.Linear(dims[-1], classes)

    def forward(self, x):  # x (B, H*W*C)
        for fc in self.fc:
            x = self.relu(fc(x))
        return self.head(x)


class CNN(Kinks):
    """conv (no bias) -> BatchNorm2d -> relu [-> maxpool 2x2] per block, then
    flatten in (C, H, W) order and a linear head."""

    def __init__(self, image, channels, pool, kernel, classes):
        super().__init__()
        H, W, cin = image
        self.pool = pool
        self.conv = nn.ModuleList()
        self.bn = nn.ModuleList()
        for i, c in enumerate(channels):
            self.conv.append(nn.Conv2d(cin, c, kernel, padding=kernel // 2, bias=False))
            self.bn.append(nn.BatchNorm2d(c, eps=1e-5, momentum=0.1))
            cin = c
            if pool[i]:
                H, W = H // 2, W // 2
        self.head = nn.Linear(cin * H * W, classes)

    def forward(self, x):  # x (B, H, W, C)
        x = x.permute(0, 3, 1, 2)
        for i, (conv, bn) in enumerate(zip(self.conv, self.bn)):
            x = self.relu(bn(conv(x)))
            if self.pool[i]:
                x = self.max_pool2d(x, 2)
        return self.head(torch.flatten(x, 1))


class Conv1D(nn.Module):
    """GPT-2's linear layer: weight (in, out), y = x @ W + b."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out))
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        return x @ self.weight + self.bias


class Attention(nn.Module):
    def __init__(self, C, n_head):
        super().__init__()
        self.n_head = n_head
        self.c_attn = Conv1D(C, 3 * C)
        self.c_proj = Conv1D(C, C)

    def forward(self, x):
        return self.c_proj(causal_attention(self.c_attn(x), self.n_head))


class FeedForward(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.c_fc = Conv1D(C, 4 * C)
        self.c_proj = Conv1D(4 * C, C)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, C, n_head):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.attn = Attention(C, n_head)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.mlp = FeedForward(C)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(Kinks):  # no kinks: tanh GELU and softmax are smooth
    def __init__(self, vocab, block, n_layer, n_head, n_embd):
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(block, n_embd)
        self.h = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd, eps=1e-5)

    def forward(self, idx):  # idx (B, T) -> logits (B, T, V)
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for block in self.h:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()  # tied output layer


def make_model(kind):
    cfg = MODEL_CONFIGS[kind]
    return {"mlp": MLP, "cnn": CNN, "gpt": GPT}[kind](**cfg)


def randomize(model, gen):
    """Weights that exercise every path: matrices ~ N(0, 0.1^2) for the gpt
    (torch's defaults otherwise), norm weights 1 + N(0, 0.1^2), biases and
    running means N(0, 0.1^2), running variances in [0.5, 1.5]."""
    with torch.no_grad():
        for name, t in model.state_dict().items():
            if name.endswith("num_batches_tracked"):
                continue
            leaf = name.rsplit(".", 1)[-1]
            if leaf == "running_var":
                t.copy_(0.5 + torch.rand(t.shape, generator=gen))
            elif leaf in ("bias", "running_mean"):
                t.copy_(0.1 * torch.randn(t.shape, generator=gen))
            elif t.dim() == 1:
                t.copy_(1.0 + 0.1 * torch.randn(t.shape, generator=gen))
            elif isinstance(model, GPT):
                t.copy_(0.1 * torch.randn(t.shape, generator=gen))
            else:  # torch's default U(-1/sqrt(fan_in), 1/sqrt(fan_in))
                bound = 1.0 / math.sqrt(t[0].numel())
                t.copy_(bound * (2 * torch.rand(t.shape, generator=gen) - 1))


def weights(model):
    """The state dict as scaletrain names it (float32, no batch counters)."""
    return {n: t.detach().float().clone() for n, t in model.state_dict().items()
            if not n.endswith("num_batches_tracked")}


def batch(kind, B, gen):
    """Random inputs and targets as the driver reads them: (x name, x, y name, y)."""
    cfg = MODEL_CONFIGS[kind]
    if kind == "gpt":
        idx = torch.randint(0, cfg["vocab"], (B, cfg["block"]), generator=gen, dtype=torch.int32)
        tgt = torch.randint(0, cfg["vocab"], (B, cfg["block"]), generator=gen, dtype=torch.int32)
        return "idx", idx, "targets", tgt
    H, W, C = cfg["image"]
    x = torch.randn(B, H, W, C, generator=gen)
    if kind == "mlp":
        x = x.reshape(B, H * W * C)
    y = torch.randint(0, cfg["classes"], (B,), generator=gen, dtype=torch.int32)
    return "x", x, "y", y


def loss_of(kind, model, x, y):
    """Logits and mean cross-entropy (targets of -100 ignored), in the model's dtype."""
    logits = model(x if kind == "gpt" else x.to(next(model.parameters()).dtype))
    V = logits.shape[-1]
    loss = F.cross_entropy(logits.reshape(-1, V), y.long().reshape(-1), ignore_index=-100)
    return logits, loss
