"""compare_training.py's MobileNet-v2 benchmark model: the layers its docstring lists, in fqcore (and in
PyTorch, when installed), and a QAT step that trains."""
import math
import os
import re
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import compare_training as ct  # noqa: E402

import fqcore.graph as G  # noqa: E402


def _documented_outputs():
    """{layer: (H, W, C)} from the docstring's table."""
    rows = re.findall(r"^ +(conv3x3 stem|inverted residual \d|conv1x1 head)\D.*?(\d+)x(\d+)x(\d+)",
                      ct.__doc__, re.M)
    return {name: tuple(map(int, hwc)) for name, *hwc in rows}


def _fqcore_output(g, name):
    if name == "conv3x3 stem":
        return g.get_operation_by_name("stem/Relu6").outputs[0]
    if name == "conv1x1 head":
        return g.get_operation_by_name("head/Relu6").outputs[0]
    i = int(name.rsplit(" ", 1)[1])
    ops = {op.name: op for op in g.get_operations()}
    op = ops.get(f"block{i}/add") or ops[f"block{i}/project/BatchNorm/FusedBatchNormV3"]
    return op.outputs[0]


def test_fqcore_graph_has_the_documented_layers():
    documented = _documented_outputs()
    assert len(documented) == 2 + len(ct.MNV2_BLOCKS)
    g, images, labels, logits, loss = ct.fqcore_mobilenet_v2()
    for name, hwc in documented.items():
        assert tuple(_fqcore_output(g, name).shape) == (None, *hwc), name
    assert tuple(logits.shape) == (None, ct.CLASSES)
    types = {op.name: op.type for op in g.get_operations()}
    adds = sorted(name for name, kind in types.items() if kind in ("Add", "AddV2"))
    assert adds == [f"block{i}/add" for i, *_, residual in ct.mobilenet_v2_blocks() if residual]
    assert adds == ["block3/add", "block5/add", "block7/add"]
    depthwise = [name for name, kind in types.items() if kind == "DepthwiseConv2dNative"]
    assert len(depthwise) == len(ct.MNV2_BLOCKS)
    assert sum(kind == "FusedBatchNormV3" for kind in types.values()) == 2 + 3 * len(ct.MNV2_BLOCKS)


def _parameters(g):
    return sum(math.prod(v.shape) for v in G.trainable_variables(g))


def test_qat_step_trains():
    x, y = ct.synthetic_images()
    x2, y2 = ct.synthetic_images()
    assert x.shape == (ct.MNV2_IMAGES, 32, 32, 3) and x.dtype == np.float32
    assert np.array_equal(x, x2) and np.array_equal(y, y2) and set(y) == set(range(ct.CLASSES))
    t = ct.fqcore_mobilenet_v2_setup(quantized=True)
    fake_quants = {op.name.split("/")[0] for op in t.graph.get_operations()
                   if op.type.startswith("FakeQuant")}
    assert fake_quants >= {"stem", "head", "logits"} | {f"block{i}" for i in range(1, 8)}
    feed = {t.images: x[:32], t.labels: y[:32]}
    losses = [float(t.session.run([t.train_op, t.updates, t.loss], feed)[2]) for _ in range(4)]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.ao.quantization's notice
def test_torch_model_matches_fqcore():
    torch = pytest.importorskip("torch")
    g = ct.fqcore_mobilenet_v2()[0]
    net = ct.torch_model(torch, False, "mobilenet_v2")
    assert sum(p.numel() for p in net.parameters()) == _parameters(g)
    out = net(torch.zeros(2, 3, 32, 32))
    assert tuple(out.shape) == (2, ct.CLASSES)
    ct.torch_model(torch, True, "mobilenet_v2")(torch.zeros(2, 3, 32, 32))  # fuses and prepares
