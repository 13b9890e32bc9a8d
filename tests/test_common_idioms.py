"""Common PyTorch idioms, written against ``torch``, run on jitgrad (``torch`` names jitgrad: the snippet's own
``import torch...`` statements resolve to jitgrad's modules) and on torch itself, so a snippet that is wrong for
torch fails too.  The first group is the idiom survey this file grew from; the second, idioms of typical training
and inference scripts.  Each snippet runs in a fresh namespace with ``torch``, ``nn`` and ``F`` bound."""
from __future__ import annotations

import builtins
import importlib
import warnings

import pytest

import jitgrad
from jitgrad.ir import settings

torch = pytest.importorskip("torch")

SURVEY = {
"default_dtype": "torch.set_default_dtype(torch.float64); a = torch.ones(2); assert a.dtype == torch.float64; torch.set_default_dtype(torch.float32); torch.get_default_dtype()",
"matmul_precision": "torch.set_float32_matmul_precision('high')",
"device_idiom": "dev = torch.device('cuda' if torch.cuda.is_available() else 'cpu'); x = torch.ones(2, device=dev).to(dev)",
"one_hot": "F.one_hot(torch.tensor([0,2,1]), num_classes=3).float()",
"topk": "torch.randn(5,4).topk(2, dim=1).indices",
"apply_init": "m = nn.Sequential(nn.Linear(3,4), nn.ReLU()); m.apply(lambda mod: nn.init.zeros_(mod.weight) if isinstance(mod, nn.Linear) else None)",
"hooks": "m = nn.Linear(3,4); h = m.register_forward_hook(lambda mod, i, o: o * 2); y = m(torch.ones(1,3)); h.remove(); m.register_forward_pre_hook(lambda mod, i: None); m.register_full_backward_hook(lambda mod, gi, go: None); m(torch.ones(1,3)).sum().backward()",
"named_modules": "m = nn.Sequential(nn.Linear(3,4)); list(m.named_modules()); list(m.named_parameters()); list(m.named_buffers()); m.get_submodule('0'); m.get_parameter('0.weight')",
"state_dict_strict": "m = nn.Linear(3,4); sd = m.state_dict(); sd['extra'] = torch.ones(1); r = m.load_state_dict(sd, strict=False); assert 'extra' in r.unexpected_keys",
"compile_options": "f = torch.compile(lambda x: x * 2, mode='reduce-overhead', fullgraph=True, dynamic=False); f(torch.ones(3))",
"compile_decorator_kw": "@torch.compile(mode='max-autotune')\ndef g(x): return x.sin()\ng(torch.ones(3))",
"inference_mode_dec": "@torch.inference_mode()\ndef h(x): return x * 2\nh(torch.ones(2))",
"no_grad_dec": "@torch.no_grad()\ndef h(x): return x * 2\nh(torch.ones(2))",
"autocast": "with torch.autocast(device_type='cpu', enabled=False): pass",
"gradscaler": "s = torch.amp.GradScaler('cpu', enabled=False) if hasattr(torch.amp, 'GradScaler') else None",
"cuda_amp": "s = torch.cuda.amp.GradScaler(enabled=False)",
"backends": "torch.backends.cudnn.benchmark = True; torch.backends.cuda.matmul.allow_tf32 = True; torch.backends.mps.is_available()",
"multinomial": "torch.multinomial(torch.tensor([0.2,0.8]), 5, replacement=True)",
"where_scalar": "torch.where(torch.tensor([True, False]), 1.0, 0.0)",
"clamp_tensor": "torch.clamp(torch.randn(3), min=torch.zeros(3), max=torch.ones(3))",
"einsum": "torch.einsum('bij,bjk->bik', torch.randn(2,3,4), torch.randn(2,4,5))",
"argmax_keepdim": "torch.randn(3,4).argmax(dim=1, keepdim=True)",
"item_tolist": "torch.tensor([1.5]).item(); torch.arange(3).tolist()",
"numpy_roundtrip": "import numpy as np; torch.from_numpy(np.ones(3)).numpy(); torch.as_tensor(np.ones(3), dtype=torch.float32)",
"tensor_of_list_of_tensors": "torch.tensor([torch.tensor(1.0).item(), 2.0])",
"stack_list": "torch.stack([torch.ones(2), torch.zeros(2)], dim=1)",
"cross_entropy_label_smoothing": "F.cross_entropy(torch.randn(4,3), torch.tensor([0,1,2,1]), label_smoothing=0.1)",
"cross_entropy_probs": "F.cross_entropy(torch.randn(4,3), torch.softmax(torch.randn(4,3), 1))",
"ce_ignore_index_3d": "F.cross_entropy(torch.randn(2,5,7), torch.randint(0,5,(2,7)), ignore_index=-1)",
"embedding_padding": "e = nn.Embedding(10, 3, padding_idx=0); e(torch.tensor([[0, 1]])).sum().backward()",
"lstm_batch_first": "l = nn.LSTM(3, 5, num_layers=2, batch_first=True, dropout=0.1); o, (h, c) = l(torch.randn(2, 4, 3))",
"transformer_encoder": "layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, norm_first=True); enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False); enc(torch.randn(2,5,8), mask=nn.Transformer.generate_square_subsequent_mask(5), is_causal=True)",
"optim_param_groups": "m = nn.Linear(2,2); o = torch.optim.AdamW([{'params': [m.weight], 'weight_decay': 0.1}, {'params': [m.bias], 'weight_decay': 0.0}], lr=1e-3, betas=(0.9, 0.95), fused=False); m(torch.ones(1,2)).sum().backward(); o.step(); o.zero_grad(set_to_none=True)",
"sched": "o = torch.optim.SGD(nn.Linear(2,2).parameters(), lr=0.1, momentum=0.9, nesterov=True); s = torch.optim.lr_scheduler.CosineAnnealingLR(o, 10); o.step(); s.step(); s.get_last_lr()",
"clip": "m = nn.Linear(2,2); m(torch.ones(1,2)).sum().backward(); torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0, error_if_nonfinite=True)",
"save_load": "import io; b = io.BytesIO(); torch.save({'a': torch.ones(2)}, b); b.seek(0); torch.load(b, weights_only=True, map_location='cpu')",
"requires_grad_": "x = torch.randn(3).requires_grad_(); (x**2).sum().backward(); x.grad.zero_()",
"retain_graph": "x = torch.randn(3, requires_grad=True); y = (x*x).sum(); y.backward(retain_graph=True); y.backward()",
"autograd_grad": "x = torch.randn(3, requires_grad=True); torch.autograd.grad((x**3).sum(), x, create_graph=True)[0].sum().backward()",
"custom_function": "class Sq(torch.autograd.Function):\n    @staticmethod\n    def forward(ctx, x):\n        ctx.save_for_backward(x); return x*x\n    @staticmethod\n    def backward(ctx, g):\n        x, = ctx.saved_tensors; return 2*x*g\nx = torch.randn(3, requires_grad=True); Sq.apply(x).sum().backward()",
"detect_anomaly": "with torch.autograd.detect_anomaly(): (torch.randn(2, requires_grad=True)*2).sum().backward()",
"tensor_repr": "repr(torch.randn(2,3)); str(nn.Linear(2,3)); f'{torch.tensor(1.5):.2f}'",
"bool_index": "x = torch.randn(5); x[x > 0] = 0; x[torch.tensor([0, 2])] += 1",
"masked_fill_": "x = torch.randn(3,3); x.masked_fill_(torch.eye(3, dtype=torch.bool), float('-inf'))",
"view_as_contig": "x = torch.randn(4,6).t(); x.contiguous().view(-1); x.reshape(-1); x.flatten(0)",
"expand_repeat": "torch.randn(3,1).expand(3,4).repeat(2,1)",
"sort_unique": "torch.sort(torch.randn(5), descending=True, stable=True); torch.unique(torch.tensor([3,1,3]), return_counts=True)",
"cumsum_dtype": "torch.arange(5).cumsum(0, dtype=torch.float32)",
"int_div": "torch.tensor([5]) // 2; torch.div(torch.tensor([5]), 2, rounding_mode='floor')",
"bernoulli": "torch.bernoulli(torch.full((3,), 0.5))",
"randn_generator": "g = torch.Generator().manual_seed(0); torch.randn(3, generator=g); torch.randperm(5, generator=g)",
"std_unbiased": "torch.randn(5).std(unbiased=False); torch.randn(5,3).var(dim=0, correction=0)",
"isfinite_all": "torch.isfinite(torch.randn(3)).all().item()",
"amp_autocast_bf16_refused": "\ntry:\n    with torch.autocast('cpu', dtype=torch.bfloat16): pass\nexcept Exception as e: assert 'autocast' in str(e) or 'support' in str(e), e",
"dataloader_workers": "from torch.utils.data import TensorDataset, DataLoader; dl = DataLoader(TensorDataset(torch.arange(10.)), batch_size=4, shuffle=True, num_workers=0, pin_memory=False); [b for b in dl]",
"random_split": "from torch.utils.data import random_split, TensorDataset; random_split(TensorDataset(torch.arange(10.)), [0.8, 0.2])",
"subset_concat": "from torch.utils.data import Subset, ConcatDataset, TensorDataset; d = TensorDataset(torch.arange(10.)); ConcatDataset([Subset(d, [0,1]), d])[3]",
"module_to_double": "nn.Linear(2,2).double().float().to(torch.float64).train(False).eval().requires_grad_(False).zero_grad()",
"parameter_count": "sum(p.numel() for p in nn.Linear(2,3).parameters() if p.requires_grad)",
"modulelist_dict": "nn.ModuleList([nn.Linear(2,2)]).append(nn.ReLU()); nn.ModuleDict({'a': nn.Linear(1,1)})['a']",
"conv_bn_pool": "m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2), nn.AdaptiveAvgPool2d((1,1)), nn.Flatten(), nn.Linear(8, 2)); m(torch.randn(2,3,8,8)).sum().backward()",
"dropout_eval": "d = nn.Dropout(0.5); d.eval(); d(torch.ones(3))",
"nn_utils_rnn": "from torch.nn.utils.rnn import pad_sequence, pack_padded_sequence; pack_padded_sequence(pad_sequence([torch.ones(3,2), torch.ones(1,2)], batch_first=True), [3,1], batch_first=True)",
"tensor_new": "x = torch.ones(2); x.new_zeros(3); x.new_ones((2,2)); x.new_tensor([1.0]); x.new_full((2,), 3.0); torch.zeros_like(x, dtype=torch.int64)",
"type_conversion": "torch.ones(2).long().int().float().double().bool().half().float()",
"chunk_split": "torch.arange(10).chunk(3); torch.arange(10).split([3,7])",
"gather_scatter": "x = torch.randn(3,4); idx = torch.tensor([[0],[2],[1]]); x.gather(1, idx); torch.zeros(3,4).scatter_(1, idx, 1.0); torch.zeros(3,4).scatter_add_(1, idx, torch.ones(3,1))",
"tril_mask_fill": "torch.ones(4,4).tril().masked_fill(torch.ones(4,4).tril() == 0, float('-inf')).softmax(-1)",
"max_with_dim": "v, i = torch.randn(3,4).max(dim=1); torch.max(torch.randn(3), torch.randn(3))",
"norm_p": "torch.randn(3,4).norm(p=2, dim=1); torch.linalg.norm(torch.randn(3)); torch.linalg.vector_norm(torch.randn(3), ord=1)",
"allclose": "torch.allclose(torch.ones(2), torch.ones(2)); torch.testing.assert_close(torch.ones(2), torch.ones(2))",
"set_seed_all": "torch.manual_seed(0); torch.cuda.manual_seed_all(0); import random; random.seed(0)",
"num_threads": "torch.set_num_threads(1); torch.get_num_threads()",
"channels_last": "torch.randn(1,3,4,4).to(memory_format=torch.channels_last).is_contiguous(memory_format=torch.channels_last)",
"finfo": "torch.finfo(torch.float32).eps; torch.iinfo(torch.int64).max; torch.finfo(torch.float32).min",
"is_tensor": "torch.is_tensor(torch.ones(1)); torch.numel(torch.ones(2,3)); isinstance(torch.ones(1), torch.Tensor)",
"broadcast_tensors": "torch.broadcast_tensors(torch.ones(2,1), torch.ones(1,3)); torch.broadcast_shapes((2,1),(1,3))",
"searchsorted_bucketize": "torch.bucketize(torch.tensor([0.5, 2.5]), torch.tensor([0., 1., 2., 3.]))",
"complex_refused": "\ntry:\n    torch.randn(2, dtype=torch.complex64)\nexcept Exception as e: pass",
}

TRAINING = {
"train_loop": "m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)); o = torch.optim.SGD(m.parameters(), lr=0.1); x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))\nfor _ in range(3):\n    o.zero_grad(); loss = F.cross_entropy(m(x), y); loss.backward(); o.step()\nassert isinstance(loss.item(), float)",
"eval_accuracy": "m = nn.Linear(4, 3); m.eval(); x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))\nwith torch.no_grad():\n    acc = (m(x).argmax(dim=1) == y).float().mean().item()\nassert 0.0 <= acc <= 1.0",
"mse_losses": "a, b = torch.randn(3, 2), torch.randn(3, 2); F.mse_loss(a, b, reduction='sum'); nn.MSELoss()(a, b); nn.L1Loss(reduction='none')(a, b); F.smooth_l1_loss(a, b, beta=0.5); F.huber_loss(a, b, delta=2.0)",
"bce_logits_pos_weight": "F.binary_cross_entropy_with_logits(torch.randn(4, 3), torch.rand(4, 3), pos_weight=torch.ones(3)); nn.BCEWithLogitsLoss()(torch.randn(2), torch.tensor([0., 1.])); F.binary_cross_entropy(torch.rand(3), torch.rand(3))",
"nll_log_softmax": "F.nll_loss(F.log_softmax(torch.randn(4, 5), dim=1), torch.tensor([0, 4, 2, 1]), reduction='mean')",
"kl_div_batchmean": "F.kl_div(F.log_softmax(torch.randn(3, 4), 1), F.softmax(torch.randn(3, 4), 1), reduction='batchmean')",
"cosine_normalize": "a, b = torch.randn(3, 5), torch.randn(3, 5); F.cosine_similarity(a, b, dim=1); F.normalize(a, p=2, dim=1); torch.nn.CosineSimilarity(dim=1)(a, b)",
"activations": "x = torch.randn(4); F.gelu(x, approximate='tanh'); F.silu(x); F.leaky_relu(x, 0.2); F.elu(x); F.softplus(x); F.mish(x); torch.tanh(x); nn.GELU()(x); nn.SiLU()(x); F.relu6(x); F.hardswish(x)",
"layer_norm_rms": "x = torch.randn(2, 3, 8); nn.LayerNorm(8)(x); F.layer_norm(x, (8,)); nn.LayerNorm(8, elementwise_affine=False, bias=False)(x)",
"interpolate_pad": "x = torch.randn(1, 2, 4, 4); F.interpolate(x, scale_factor=2, mode='nearest'); F.interpolate(x, size=(6, 6), mode='bilinear', align_corners=False); F.pad(x, (1, 1, 2, 2), value=0.0); F.pad(x, (1, 1, 1, 1), mode='reflect'); F.pad(x, (1, 1), mode='constant', value=-1.0)",
"sdpa_causal": "q = torch.randn(2, 2, 5, 4); F.scaled_dot_product_attention(q, q, q, is_causal=True, dropout_p=0.0); F.scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(5, 5, dtype=torch.bool).tril())",
"multihead_attention": "mha = nn.MultiheadAttention(8, 2, batch_first=True); x = torch.randn(2, 5, 8); out, w = mha(x, x, x, need_weights=True); out2, _ = mha(x, x, x, key_padding_mask=torch.zeros(2, 5, dtype=torch.bool), need_weights=False)",
"gru_rnn": "o, h = nn.GRU(3, 4, batch_first=True)(torch.randn(2, 5, 3)); o2, h2 = nn.RNN(3, 4, nonlinearity='tanh')(torch.randn(5, 2, 3), torch.zeros(1, 2, 4)); c = nn.LSTMCell(3, 4)(torch.randn(2, 3))",
"conv1d_same": "nn.Conv1d(3, 4, 3, padding='same')(torch.randn(2, 3, 10)); nn.ConvTranspose2d(3, 2, 2, stride=2)(torch.randn(1, 3, 4, 4)); F.conv2d(torch.randn(1, 3, 5, 5), torch.randn(2, 3, 3, 3), stride=2, padding=1)",
"batchnorm_running_stats": "bn = nn.BatchNorm1d(4, momentum=0.1); x = torch.randn(8, 4); bn(x); bn.eval(); y = bn(x); assert bn.running_mean.shape == (4,) and int(bn.num_batches_tracked) == 1",
"groupnorm_instancenorm": "nn.GroupNorm(2, 4)(torch.randn(2, 4, 3)); nn.InstanceNorm1d(4)(torch.randn(2, 4, 6)); nn.LayerNorm([4, 3])(torch.randn(2, 4, 3))",
"sequential_ordereddict": "from collections import OrderedDict\nm = nn.Sequential(OrderedDict([('fc', nn.Linear(2, 3)), ('act', nn.Tanh())])); m.fc; m[0]; m[-1]; len(m); m(torch.ones(1, 2))",
"custom_module_buffer": "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.w = nn.Parameter(torch.randn(3, 3))\n        self.register_buffer('scale', torch.ones(3))\n        self.register_buffer('tmp', torch.zeros(1), persistent=False)\n    def forward(self, x):\n        return x @ self.w * self.scale\nn = Net(); n(torch.ones(2, 3)).sum().backward(); assert 'scale' in n.state_dict() and 'tmp' not in n.state_dict() and n.w.grad is not None",
"freeze_layers": "m = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 1))\nfor p in m[0].parameters():\n    p.requires_grad = False\nm(torch.ones(3, 2)).sum().backward(); assert m[0].weight.grad is None and m[1].weight.grad is not None; o = torch.optim.Adam(filter(lambda p: p.requires_grad, m.parameters()), lr=1e-3); o.step()",
"deepcopy_load_state_dict": "import copy\nm = nn.Linear(3, 2); m2 = copy.deepcopy(m); m2.load_state_dict(m.state_dict()); assert torch.equal(m2.weight, m.weight) and m2.weight is not m.weight",
"optimizer_state_dict_roundtrip": "m = nn.Linear(2, 2); o = torch.optim.Adam(m.parameters(), lr=1e-3); m(torch.ones(1, 2)).sum().backward(); o.step(); sd = o.state_dict(); o2 = torch.optim.Adam(m.parameters(), lr=1e-3); o2.load_state_dict(sd); assert o2.state_dict()['state'][0]['step'] == 1",
"schedulers": "o = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1)\nscheds = [torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5), torch.optim.lr_scheduler.LambdaLR(o, lambda e: 0.9 ** e)]\nfor _ in range(3):\n    o.step()\n    for s in scheds: s.step()\no.param_groups[0]['lr']",
"onecycle_warmup": "o = torch.optim.AdamW(nn.Linear(2, 2).parameters(), lr=1e-3, weight_decay=0.01); s = torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.01, total_steps=10)\nfor _ in range(3):\n    o.step(); s.step()\ns.get_last_lr()[0]",
"linear_warmup_sequential": "o = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1); w = torch.optim.lr_scheduler.LinearLR(o, start_factor=0.1, total_iters=2); c = torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=5); s = torch.optim.lr_scheduler.SequentialLR(o, [w, c], milestones=[2])\nfor _ in range(4):\n    o.step(); s.step()",
"reduce_on_plateau": "o = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1); s = torch.optim.lr_scheduler.ReduceLROnPlateau(o, mode='min', factor=0.5, patience=0)\nfor v in [1.0, 1.0, 1.0]:\n    s.step(v)\nassert o.param_groups[0]['lr'] < 0.1",
"manual_lr_set": "o = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1)\nfor g in o.param_groups:\n    g['lr'] = 0.01\nassert o.param_groups[0]['lr'] == 0.01; o.add_param_group({'params': [nn.Parameter(torch.ones(1))], 'lr': 0.5})",
"grad_accumulation": "m = nn.Linear(2, 1); o = torch.optim.SGD(m.parameters(), lr=0.1); o.zero_grad()\nfor i in range(4):\n    (m(torch.ones(3, 2)).pow(2).mean() / 4).backward()\no.step(); o.zero_grad(set_to_none=False); assert m.weight.grad is not None and float(m.weight.grad.abs().sum()) == 0.0",
"clip_grad_value_vector": "m = nn.Linear(3, 2); m(torch.ones(1, 3)).sum().backward(); nn.utils.clip_grad_value_(m.parameters(), 0.5); v = nn.utils.parameters_to_vector(m.parameters()); nn.utils.vector_to_parameters(v * 0, m.parameters()); total = nn.utils.clip_grad_norm_(m.parameters(), max_norm=1.0, norm_type=2.0); float(total)",
"init_functions": "w = torch.empty(4, 3); nn.init.kaiming_normal_(w, mode='fan_out', nonlinearity='relu'); nn.init.xavier_uniform_(w, gain=nn.init.calculate_gain('tanh')); nn.init.trunc_normal_(w, std=0.02); nn.init.normal_(w, mean=0.0, std=0.02); nn.init.constant_(w, 0.1); nn.init.ones_(w); nn.init.orthogonal_(w); nn.init.uniform_(w, -0.1, 0.1)",
"dataloader_drop_last": "from torch.utils.data import TensorDataset, DataLoader\ndl = DataLoader(TensorDataset(torch.arange(10.), torch.arange(10)), batch_size=3, drop_last=True, shuffle=False); bs = [x.shape[0] for x, y in dl]; assert bs == [3, 3, 3] and len(dl) == 3",
"custom_dataset_collate": "from torch.utils.data import Dataset, DataLoader\nclass D(Dataset):\n    def __len__(self): return 5\n    def __getitem__(self, i): return {'x': torch.full((2,), float(i)), 'y': i}\nb = next(iter(DataLoader(D(), batch_size=2))); assert b['x'].shape == (2, 2) and b['y'].tolist() == [0, 1]\nb2 = next(iter(DataLoader(D(), batch_size=2, collate_fn=lambda items: torch.stack([it['x'] for it in items])))); assert b2.shape == (2, 2)",
"weighted_sampler": "from torch.utils.data import WeightedRandomSampler, DataLoader, TensorDataset, RandomSampler, SequentialSampler, BatchSampler\ns = WeightedRandomSampler([0.1, 0.9], num_samples=4, replacement=True); assert len(list(s)) == 4; list(BatchSampler(SequentialSampler(range(5)), batch_size=2, drop_last=False)); DataLoader(TensorDataset(torch.arange(4.)), sampler=RandomSampler(range(4)), batch_size=2)",
"manual_seed_reproducible": "torch.manual_seed(0); a = torch.rand(3); b = torch.randn(2); torch.manual_seed(0); assert torch.equal(a, torch.rand(3)) and torch.equal(b, torch.randn(2)); s = torch.get_rng_state(); c = torch.rand(1); torch.set_rng_state(s); assert torch.equal(c, torch.rand(1))",
"to_device_numpy": "x = torch.randn(2, 3); y = x.to('cpu', non_blocking=True); x.cpu().detach().numpy().tolist(); x.to(device='cpu', dtype=torch.float64); x.to(torch.device('cpu')); torch.ones(1).cuda if False else None; x.device.type == 'cpu'",
"where_clamp_log": "x = torch.randn(5); torch.where(x > 0, x, torch.zeros_like(x)); torch.log(x.clamp(min=1e-8)); x.clamp_(-0.5, 0.5); torch.clip(x, max=0.1)",
"sampling_temperature": "logits = torch.randn(2, 10); probs = F.softmax(logits / 0.7, dim=-1); idx = torch.multinomial(probs, num_samples=1); assert idx.shape == (2, 1)\nv, _ = torch.topk(logits, 3); logits[logits < v[:, [-1]]] = -float('inf'); torch.argmax(logits, dim=-1, keepdim=True)",
"cat_neg_dim_masks": "a, b = torch.ones(2, 3), torch.zeros(2, 1); torch.cat([a, b], dim=-1); torch.cat((a, a)); mask = torch.ones(2, 4); mask[:, None, None, :].expand(2, 1, 4, 4); (1.0 - mask) * torch.finfo(torch.float32).min",
"positions_causal_mask": "T = 5; pos = torch.arange(T, dtype=torch.long).unsqueeze(0); m = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1); torch.full((T, T), float('-inf')).triu(1); torch.tril(torch.ones(T, T)).view(1, 1, T, T)",
"masked_select_nonzero": "x = torch.randn(4, 3); x.masked_select(x > 0); torch.nonzero(x > 0, as_tuple=True); (x > 0).nonzero(); x[x.abs() > 0.5]; torch.count_nonzero(x > 0)",
"sort_argsort_cumsum": "x = torch.randn(6); x.argsort(descending=True); torch.sort(x, dim=0); x.cumsum(0); x.cumprod(dim=0); torch.cummax(x, 0); x.sort(stable=True).indices",
"reductions_keepdim": "x = torch.randn(2, 3, 4); x.mean(dim=(1, 2), keepdim=True); x.sum(-1); x.amax(dim=1); x.std(dim=0, keepdim=True); torch.var_mean(x, dim=1); torch.std_mean(x, dim=0); x.logsumexp(dim=1); x.prod(0); x.max(); x.min(dim=2).values; torch.median(x); x.norm(dim=-1)",
"views_permute": "x = torch.randn(2, 3, 4); x.permute(0, 2, 1).contiguous().view(2, -1); torch.flatten(x, 1); x.unsqueeze(-1).squeeze(-1); x.transpose(1, 2).reshape(2, 12); x.view(-1, 4).shape; x.unflatten(2, (2, 2)); x.movedim(0, -1); x.flatten(start_dim=0, end_dim=1)",
"matmul_family": "a, b = torch.randn(2, 3, 4), torch.randn(4, 5); a @ b; torch.matmul(a, b); torch.bmm(a, torch.randn(2, 4, 2)); torch.baddbmm(torch.zeros(2, 3, 2), a, torch.randn(2, 4, 2)); torch.addmm(torch.zeros(3), torch.randn(3, 4), torch.randn(4, 3)); torch.outer(torch.ones(2), torch.ones(3)); torch.mm(torch.ones(2, 3), torch.ones(3, 1)); torch.einsum('bhqd,bhkd->bhqk', torch.randn(1, 2, 3, 4), torch.randn(1, 2, 5, 4))",
"ema_update": "m = nn.Linear(3, 2); ema = nn.Linear(3, 2); ema.load_state_dict(m.state_dict())\nwith torch.no_grad():\n    for pe, p in zip(ema.parameters(), m.parameters()):\n        pe.mul_(0.99).add_(p, alpha=0.01)\n        pe.lerp_(p, 0.1)\n        pe.copy_(p)",
"manual_sgd_step": "w = torch.randn(3, requires_grad=True); loss = (w ** 2).sum(); loss.backward()\nwith torch.no_grad():\n    w -= 0.1 * w.grad\n    w.grad.zero_()\nassert w.requires_grad and w.is_leaf",
"nan_checks": "x = torch.tensor([1.0, float('nan'), float('inf')]); torch.isnan(x).any(); torch.isinf(x).sum(); torch.nan_to_num(x, nan=0.0, posinf=1.0); x.isfinite().all(); torch.nanmean(x[:2])",
"fill_like": "x = torch.randn(2, 2); torch.full_like(x, 7); x.fill_(1.0); x.zero_(); torch.ones_like(x, dtype=torch.long); torch.empty_like(x).normal_(0, 0.02); torch.rand(2, 3).uniform_(-1, 1); torch.zeros(3).bernoulli_(0.5)",
"comparisons": "x, y = torch.ones(3), torch.ones(3); assert torch.equal(x, y) and torch.allclose(x, y, atol=1e-6) and x.eq(y).all() and bool((x == y).all()); torch.isclose(x, y); torch.maximum(x, y); torch.ne(x, y).any()",
"shape_queries": "x = torch.randn(2, 3); assert x.size(0) == 2 and x.shape[-1] == 3 and x.dim() == 2 and x.ndim == 2 and x.numel() == 6 and len(x) == 2 and x.size() == (2, 3) and list(x.shape) == [2, 3] and x.nelement() == 6",
"dtype_queries": "x = torch.randn(2); assert x.dtype == torch.float32 and x.is_floating_point() and x.element_size() == 4 and not torch.arange(2).is_floating_point() and x.long().dtype == torch.int64 and x.to(torch.int32).dtype == torch.int32 and x.type(torch.float64).dtype == torch.float64",
"python_scalars": "x = torch.tensor([2.5]); float(x); int(torch.tensor(3)); bool(torch.tensor(True)); x.item() + 1; round(torch.tensor(2.6).item()); '%.3f' % x.item(); torch.tensor(3) + 2; 2 ** torch.tensor([1., 2.])",
"indexing_forms": "x = torch.arange(24).view(2, 3, 4); x[..., 0]; x[:, None]; x[[0, 1]]; x[0, 1:, ::2]; x[:, torch.tensor([0, 2])]; x[x > 10]; x[-1]; x[:, -1, :]; x.select(1, 0); x.narrow(2, 1, 2); x.index_select(2, torch.tensor([0, 3]))",
"gather_ce_manual": "logp = torch.randn(4, 5).log_softmax(-1); y = torch.tensor([0, 1, 4, 2]); -logp.gather(1, y.unsqueeze(1)).squeeze(1).mean(); torch.zeros(4, 5).scatter_(1, y.unsqueeze(1), 1.0); F.one_hot(y, 5).float().argmax(1)",
"module_flags_counts": "m = nn.Sequential(nn.Linear(2, 3), nn.Dropout(0.1)); assert m.training; m.eval(); assert not m.training and not m[1].training; m.train(); sum(p.numel() for p in m.parameters()); [n for n, _ in m.named_children()]; list(m.children()); list(m.modules())",
"save_load_file": "import tempfile, os\nm = nn.Linear(2, 2)\nwith tempfile.TemporaryDirectory() as d:\n    f = os.path.join(d, 'ckpt.pt'); torch.save({'model': m.state_dict(), 'epoch': 3}, f); ck = torch.load(f, map_location='cpu'); m.load_state_dict(ck['model']); assert ck['epoch'] == 3",
"pickle_tensor": "import pickle; x = torch.randn(3); y = pickle.loads(pickle.dumps(x)); assert torch.equal(x, y)",
"autograd_functional": "torch.autograd.functional.jacobian(lambda x: x ** 2, torch.ones(3)); torch.autograd.functional.hessian(lambda x: (x ** 3).sum(), torch.ones(2)); torch.autograd.functional.vjp(lambda x: x * 2, torch.ones(2), torch.ones(2))",
"tensor_hooks_retain_grad": "x = torch.randn(3, requires_grad=True); h = x.register_hook(lambda g: g * 2); y = x * 3; y.retain_grad(); y.sum().backward(); assert torch.equal(y.grad, torch.ones(3)) and torch.allclose(x.grad, torch.full((3,), 6.0)); h.remove()",
"compile_module": "m = nn.Sequential(nn.Linear(3, 4), nn.ReLU()); cm = torch.compile(m); cm(torch.randn(2, 3)).sum().backward(); assert m[0].weight.grad is not None",
"grad_mode_contexts": "x = torch.ones(2, requires_grad=True)\nwith torch.set_grad_enabled(False):\n    assert not (x * 2).requires_grad\nwith torch.inference_mode():\n    y = x * 2\nwith torch.enable_grad():\n    assert (x * 2).requires_grad\nassert torch.is_grad_enabled()",
"default_dtype_float64_model": "torch.set_default_dtype(torch.float64)\ntry:\n    m = nn.Linear(2, 2); assert m.weight.dtype == torch.float64 and m(torch.ones(1, 2)).dtype == torch.float64 and torch.tensor([1.0]).dtype == torch.float64 and (torch.arange(3) / 2).dtype == torch.float64\nfinally:\n    torch.set_default_dtype(torch.float32)\nassert torch.get_default_dtype() == torch.float32",
"div_rounding_modes": "a = torch.tensor([7, -7]); assert torch.div(a, 2, rounding_mode='trunc').tolist() == [3, -3] and torch.div(a, 2, rounding_mode='floor').tolist() == [3, -4] and (a / 2).tolist() == [3.5, -3.5] and a.div(2, rounding_mode='floor').dtype == torch.int64; b = torch.tensor([7.5]); b.div_(2, rounding_mode='floor'); torch.true_divide(a, 2)",
"finfo_clamp": "x = torch.rand(3); x.clamp(min=torch.finfo(x.dtype).eps); torch.finfo(torch.float64).max; torch.iinfo(torch.int32).min; torch.finfo(torch.float16).tiny",
"parameter_isinstance": "m = nn.Linear(2, 2); assert all(isinstance(p, nn.Parameter) for p in m.parameters()) and isinstance(m.weight, torch.Tensor); p = nn.Parameter(torch.zeros(2), requires_grad=False); assert not p.requires_grad",
"loss_modules_options": "nn.CrossEntropyLoss(label_smoothing=0.1, ignore_index=-100)(torch.randn(3, 4), torch.tensor([0, -100, 2])); nn.CrossEntropyLoss(weight=torch.ones(4), reduction='sum')(torch.randn(3, 4), torch.tensor([0, 1, 2])); nn.NLLLoss()(torch.randn(2, 3).log_softmax(1), torch.tensor([0, 2])); nn.BCELoss()(torch.rand(3), torch.rand(3)); nn.TripletMarginLoss()(torch.randn(2, 3), torch.randn(2, 3), torch.randn(2, 3))",
"dataloader_iter_next": "from torch.utils.data import DataLoader, TensorDataset\nit = iter(DataLoader(TensorDataset(torch.randn(5, 2), torch.arange(5)), batch_size=2, shuffle=True, generator=torch.Generator().manual_seed(0))); x, y = next(it); assert x.shape == (2, 2) and y.dtype == torch.int64",
"tensor_split_roll_flip": "x = torch.arange(10); torch.tensor_split(x, 3); torch.roll(x, 1, 0); torch.flip(x, [0]); x.flip(0); torch.fliplr(x.view(2, 5)); x.unfold(0, 3, 2); torch.repeat_interleave(x[:3], 2)",
"meshgrid_cdist": "a, b = torch.arange(3.), torch.arange(2.); gx, gy = torch.meshgrid(a, b, indexing='ij'); torch.cdist(torch.randn(3, 2), torch.randn(4, 2)); torch.dist(a, a); torch.stack(torch.meshgrid(a, b, indexing='xy'), -1)",
"threshold_bincount": "x = torch.randn(5); (torch.sigmoid(x) > 0.5).long(); torch.bincount(torch.tensor([0, 1, 1, 3])); torch.histc(torch.tensor([1., 2., 1.]), bins=4, min=0, max=3); torch.unique(torch.tensor([1, 3, 1]), sorted=True, return_inverse=True)",
"random_factories": "torch.randint(0, 10, (3,)); torch.randint(5, (2, 2)); torch.randperm(5); torch.randn(2, 3, dtype=torch.float64); torch.rand(2, requires_grad=True); torch.normal(torch.zeros(3), torch.ones(3)); torch.randint_like(torch.ones(3), 5); torch.randn_like(torch.ones(2))",
"num_threads_idiom": "n = torch.get_num_threads(); torch.set_num_threads(max(1, n)); assert torch.get_num_threads() == max(1, n); torch.get_num_interop_threads()",
"matmul_precision_idiom": "prev = torch.get_float32_matmul_precision(); torch.set_float32_matmul_precision('high'); assert torch.get_float32_matmul_precision() == 'high'; torch.set_float32_matmul_precision(prev)",
"testing_make_tensor": "from torch.testing import make_tensor, assert_close\nt = make_tensor((2, 3), dtype=torch.float32, device='cpu', low=-1, high=1); assert_close(t, t.clone()); assert_close(t, t + 1e-7)\ntry:\n    assert_close(t, t + 1)\nexcept AssertionError as e:\n    assert 'Tensor-likes are not close!' in str(e)",
"broadcast_shapes_is_tensor": "assert torch.broadcast_shapes((2, 1), (3,)) == (2, 3) and torch.is_tensor(torch.ones(1)) and not torch.is_tensor([1]) and torch.is_floating_point(torch.ones(1)) and not torch.is_storage(torch.ones(1))",
"compile_disable_backend": "f = torch.compile(lambda x: x + 1, disable=True); f(torch.ones(2)); g = torch.compile(lambda x: x.cos(), backend='eager'); g(torch.ones(2)); h = torch.compile(dynamic=True)(lambda x: x * 3); h(torch.ones(3))",
"embedding_tied_weights": "emb = nn.Embedding(10, 4); head = nn.Linear(4, 10, bias=False); head.weight = emb.weight; out = head(emb(torch.tensor([[1, 2]]))); out.sum().backward(); assert emb.weight.grad is not None and head.weight is emb.weight",
"pack_pad_rnn": "from torch.nn.utils.rnn import pad_sequence, pack_padded_sequence, pad_packed_sequence\nseqs = [torch.randn(3, 2), torch.randn(1, 2)]; padded = pad_sequence(seqs, batch_first=True); packed = pack_padded_sequence(padded, torch.tensor([3, 1]), batch_first=True, enforce_sorted=False); out, _ = nn.LSTM(2, 4, batch_first=True)(packed); o, lens = pad_packed_sequence(out, batch_first=True); assert o.shape == (2, 3, 4) and lens.tolist() == [3, 1]",
"deterministic": "torch.backends.cudnn.deterministic = True; torch.use_deterministic_algorithms(True); torch.use_deterministic_algorithms(False); torch.are_deterministic_algorithms_enabled()",
"printoptions": "torch.set_printoptions(precision=3, sci_mode=False); assert repr(torch.tensor([1.23456])) == 'tensor([1.235])'; torch.set_printoptions(profile='default'); assert repr(torch.tensor([1.23456])) == 'tensor([1.2346])'",
"anomaly_flag": "torch.autograd.set_detect_anomaly(True); torch.autograd.set_detect_anomaly(False)",
"cuda_queries": "torch.cuda.device_count(); torch.cuda.is_available(); torch.cuda.empty_cache(); torch.backends.mps.is_built() if hasattr(torch.backends.mps, 'is_built') else None",
"checkpoint": "from torch.utils.checkpoint import checkpoint\nx = torch.randn(3, requires_grad=True); checkpoint(lambda t: t.sin() * 2, x, use_reentrant=False).sum().backward()",
"weight_norm_param": "m = nn.utils.parametrizations.weight_norm(nn.Linear(3, 2)); m(torch.ones(1, 3)).sum().backward()",
"spectral_norm": "m = nn.utils.parametrizations.spectral_norm(nn.Linear(3, 2)); m(torch.ones(1, 3))",
"dropout_functional": "F.dropout(torch.ones(3), p=0.5, training=False); F.dropout(torch.ones(3), 0.2); nn.Dropout1d(0.1)(torch.ones(2, 3, 4)); nn.Dropout2d(0.1)(torch.ones(1, 2, 3, 3))",
"generator_device": "g = torch.Generator(device='cpu'); g.manual_seed(1); torch.rand(2, generator=g); g.initial_seed(); g.get_state()",
"pin_memory": "torch.ones(2).pin_memory() if torch.cuda.is_available() else torch.ones(2); torch.ones(2).is_pinned()",
"numpy_float": "import numpy as np; torch.from_numpy(np.arange(3)).float(); torch.tensor(np.float32(1.5)); torch.as_tensor([1, 2]).numpy(); np.asarray(torch.ones(2))",
"new_empty": "x = torch.ones(2); x.new_empty((2,)); x.new_empty(3); x.new_zeros(2, 2).shape",
"identity_unflatten_upsample": "nn.Identity()(torch.ones(2)); nn.Unflatten(1, (2, 2))(torch.ones(3, 4)); nn.Upsample(scale_factor=2, mode='nearest')(torch.ones(1, 1, 2, 2)); nn.PixelShuffle(2)(torch.ones(1, 4, 2, 2)); nn.Flatten(0)(torch.ones(2, 2))",
"embedding_pretrained": "e = nn.Embedding.from_pretrained(torch.randn(5, 3), freeze=True); e(torch.tensor([1])); F.embedding(torch.tensor([0, 2]), torch.randn(4, 3))",
"adam_amsgrad": "m = nn.Linear(2, 2); o = torch.optim.Adam(m.parameters(), lr=1e-3, amsgrad=True, weight_decay=1e-4); m(torch.ones(1, 2)).sum().backward(); o.step(); torch.optim.RMSprop(m.parameters(), lr=0.01, momentum=0.9).step(); torch.optim.Adagrad(m.parameters()).step()",
"more_schedulers": "o = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1); s1 = torch.optim.lr_scheduler.MultiStepLR(o, [1, 2], 0.1); s2 = torch.optim.lr_scheduler.ExponentialLR(o, 0.9); s3 = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(o, T_0=2)\nfor _ in range(3):\n    o.step(); s1.step(); s2.step(); s3.step()\ns1.state_dict(); torch.optim.lr_scheduler.ChainedScheduler([torch.optim.lr_scheduler.ConstantLR(o, factor=0.5, total_iters=2)]).step()",
"unfold_fold": "F.unfold(torch.randn(1, 2, 4, 4), kernel_size=2); F.fold(torch.randn(1, 8, 9), output_size=(4, 4), kernel_size=2)",
"linalg": "a = torch.randn(3, 3) + 3 * torch.eye(3); torch.linalg.inv(a); torch.linalg.svd(a, full_matrices=False); torch.diag(a); torch.linalg.solve(a, torch.ones(3)); torch.linalg.cholesky(a @ a.T); torch.linalg.eigh(a @ a.T); torch.det(a); torch.linalg.qr(a); torch.trace(a)",
"distributions": "from torch.distributions import Normal, Categorical\nNormal(0.0, 1.0).log_prob(torch.zeros(2)); c = Categorical(logits=torch.randn(2, 3)); c.sample(); c.entropy(); Normal(torch.zeros(2), torch.ones(2)).rsample((3,)).shape",
"autograd_grad_unused": "x, y = torch.ones(2, requires_grad=True), torch.ones(2, requires_grad=True); gx, gy = torch.autograd.grad((x * 2).sum(), [x, y], allow_unused=True); assert gy is None; torch.autograd.grad(x * 2, x, grad_outputs=torch.ones(2))",
"no_grad_method_decorator": "class M(nn.Module):\n    def __init__(self):\n        super().__init__(); self.l = nn.Linear(2, 2)\n    @torch.no_grad()\n    def predict(self, x):\n        return self.l(x).argmax(-1)\nassert not M().predict(torch.ones(1, 2)).requires_grad",
"post_accumulate_hook": "p = nn.Parameter(torch.ones(2)); seen = []; p.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad.clone())); (p * 2).sum().backward(); assert len(seen) == 1",
"clone_detach_requires": "x = torch.randn(2); y = x.clone().detach().requires_grad_(True); torch.tensor(1.0, requires_grad=True).backward(); y.data.fill_(0); y.data",
"tensor_apply_math": "x = torch.randn(3); x.abs_().sqrt_(); torch.rsqrt(x + 1); x.exp().log1p(); torch.sign(x); x.reciprocal(); x.pow_(2); torch.pow(2, x); x.floor().ceil().round(); torch.round(x, decimals=2); x.frac(); x.sinh(); torch.atan2(x, x + 1)",
"tensor_type_strings": "x = torch.ones(2); x.type(); x.dtype; str(x.dtype); x.double().type(); torch.ones(2, dtype=torch.int64).type()",
"module_apply_to": "m = nn.Linear(2, 2); m.to('cpu'); m.cpu(); m.to(torch.float64); m.float(); m.requires_grad_(False); m.zero_grad(); m.apply(lambda x: None); m.extra_repr(); m.type(torch.float64)",
"batched_topk_gather": "logits = torch.randn(4, 10); v, i = logits.topk(3, dim=-1, largest=True, sorted=True); torch.gather(logits, -1, i); logits.kthvalue(2, dim=1); torch.searchsorted(torch.tensor([1., 2., 3.]), torch.tensor([2.5]))",
"amp_autocast_cpu_disabled_training": "m = nn.Linear(2, 2); o = torch.optim.SGD(m.parameters(), lr=0.1); scaler = torch.amp.GradScaler('cpu', enabled=False)\nwith torch.autocast(device_type='cpu', dtype=torch.bfloat16, enabled=False):\n    loss = m(torch.ones(1, 2)).sum()\nscaler.scale(loss).backward(); scaler.unscale_(o); scaler.step(o); scaler.update()",
"state_dict_keys_prefix": "m = nn.Sequential(nn.Linear(2, 2)); sd = {'module.' + k: v for k, v in m.state_dict().items()}; sd = {k.removeprefix('module.'): v for k, v in sd.items()}; m.load_state_dict(sd); list(m.state_dict().keys()) == ['0.weight', '0.bias']",
"tensor_list_ops": "xs = [torch.ones(2), torch.zeros(2)]; torch.stack(xs).mean(0); torch.cat(xs).view(2, 2); sum(xs); max(t.sum().item() for t in xs); torch.vstack(xs); torch.hstack(xs); torch.dstack(xs)",
}

SNIPPETS = {**SURVEY, **TRAINING}
assert len(SNIPPETS) == len(SURVEY) + len(TRAINING)


def _jitgrad_import(name, globals=None, locals=None, fromlist=(), level=0):
    """``__import__`` with ``torch`` and ``torch.*`` read as ``jitgrad`` and ``jitgrad.*``."""
    if level == 0 and (name == "torch" or name.startswith("torch.")):
        real = "jitgrad" + name[len("torch"):]
        mod = importlib.import_module(real)
        return mod if fromlist else jitgrad
    return builtins.__import__(name, globals, locals, fromlist, level)


def _namespace(lib):
    if lib == "torch":
        return {"torch": torch, "nn": torch.nn, "F": torch.nn.functional}
    return {"torch": jitgrad, "nn": jitgrad.nn, "F": jitgrad.nn.functional,
            "__builtins__": {**vars(builtins), "__import__": _jitgrad_import}}


@pytest.fixture
def restore_globals():
    """Snippets may set process-wide state (default dtype, threads, matmul precision): put it back."""
    jt, tt = settings.STATE.num_threads, torch.get_num_threads()
    tp = torch.get_float32_matmul_precision()
    try:
        yield
    finally:
        jitgrad.set_default_dtype(jitgrad.float32)
        torch.set_default_dtype(torch.float32)
        settings.STATE.num_threads = jt
        torch.set_num_threads(tt)
        jitgrad.set_float32_matmul_precision("highest")
        torch.set_float32_matmul_precision(tp)
        jitgrad.set_printoptions(profile="default")
        torch.set_printoptions(profile="default")
        jitgrad.use_deterministic_algorithms(False)
        torch.use_deterministic_algorithms(False)


@pytest.mark.parametrize("lib", ["jitgrad", "torch"])
@pytest.mark.parametrize("name", list(SNIPPETS))
def test_idiom(name, lib, restore_globals):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(SNIPPETS[name], f"<idiom {name}>", "exec"), _namespace(lib))


def test_jitgrad_namespace_resolves_imports_to_jitgrad():
    ns = _namespace("jitgrad")
    exec("import torch.nn.functional as G\nfrom torch.utils.data import DataLoader\nimport torch\nimport math", ns)
    assert ns["G"] is jitgrad.nn.functional and ns["DataLoader"].__module__.startswith("jitgrad")
    assert ns["torch"] is jitgrad and ns["math"].__name__ == "math"
