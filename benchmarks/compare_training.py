"""Training steps in fqcore, TensorFlow and PyTorch, float and quantization-aware; prints markdown tables.

Usage:  python benchmarks/compare_training.py [--model demo|mobilenet_v2|both] [--tf-python /opt/tfenv/bin/python]
                                             [--tf-onednn both|on|off] [--steps N] [--repeats 7] [--warmup N]
                                             [--no-torch] [--json FILE]

Two models (--model, default both), each written once per framework below (fqcore.graph.layers, tf.compat.v1,
tf_keras, torch.nn) with the same layers, and trained with momentum-0.9 SGD at 0.01, sparse softmax cross-entropy:

demo: fqcore.demo.build_model's (conv3x3 32 + BN + relu6; a depthwise 3x3 + BN + relu6, pointwise 1x1 32 + BN
    block with a residual add and relu6; conv3x3 stride 2 64 + BN + relu6; global average pool; dense 10), on
    batches of 64 of the bundled 8x8 digits (fqcore.datasets.load_digits).
mobilenet_v2: a MobileNet-v2 (width multiplier 0.5) for edge training, on batches of 32 of synthetic 32x32x3
    images in 10 classes (a fixed random template per class plus noise, seed 0; 512 images):

        layer                       output       expand  out  stride  residual add
        conv3x3 stem + BN + relu6   16x16x16     -       16   2       -
        inverted residual 1         16x16x8      x6      8    1       -
        inverted residual 2         8x8x16       x6      16   2       -
        inverted residual 3         8x8x16       x6      16   1       yes
        inverted residual 4         4x4x16       x6      16   2       -
        inverted residual 5         4x4x16       x6      16   1       yes
        inverted residual 6         4x4x32       x6      32   1       -
        inverted residual 7         4x4x32       x6      32   1       yes
        conv1x1 head + BN + relu6   4x4x1280     -       1280 1       -
        global average pool, dense 10

    An inverted residual block: conv1x1 to 6x its input channels + BN + relu6, depthwise 3x3 (the block's stride) +
    BN + relu6, conv1x1 project + BN (linear), and the add of the block's input when the shapes match. The channel
    counts are the paper's x 0.5 rounded to multiples of 8 (as Keras does), except the head's 1280, which (as in the
    paper and Keras) the width multiplier does not shrink. Convolutions have no bias (batch norm follows each); TF's
    SAME padding at stride 2 pads bottom/right only where PyTorch's padding=1 pads all sides (same shapes and cost).
    Its float models do not quantize their input; tfmot's and PyTorch's QAT models do, contrib's rewrite does not
    (fqcore's demo model has a fake quant on its input, float and QAT).

Each framework runs in its own process (TensorFlow in --tf-python's, so it may live in another environment), and
each process times its variants in interleaved repeats, alternating the order: one repeat is --steps back-to-back
training steps, each fetching the loss; reported is the median over repeats of the ms per step. A framework that
cannot be imported is reported as not installed.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

try:  # run as a script, benchmarks/ is on sys.path; imported by asv, it is a package
    from .machine import cpu_model
except ImportError:
    from machine import cpu_model

LEARNING_RATE = 0.01
MOMENTUM = 0.9
CLASSES = 10
RESULT_TAG = "COMPARE_TRAINING_RESULT "

# Per model: batch size, input shape (NHWC), default timed steps per repeat and warm-up steps (a MobileNet-v2
# step costs about ten demo steps).
MODELS = {"demo": {"batch": 64, "shape": (8, 8, 1), "steps": 100, "warmup": 20,
                   "title": "The demo's training step"},
          "mobilenet_v2": {"batch": 32, "shape": (32, 32, 3), "steps": 20, "warmup": 5,
                           "title": "A MobileNet-v2 (width 0.5) training step"}}

# MobileNet-v2 at width 0.5, as in the docstring's table: the stem's channels, then per inverted residual block
# (expansion factor, output channels, stride of its depthwise conv), then the head's channels.
MNV2_STEM = 16
MNV2_BLOCKS = [(6, 8, 1), (6, 16, 2), (6, 16, 1), (6, 16, 2), (6, 16, 1), (6, 32, 1), (6, 32, 1)]
MNV2_HEAD = 1280
MNV2_IMAGES = 512

FQCORE_THREADS = ("fqcore kernels and numpy's OpenBLAS on the threads Session.run gives them (its defaults: "
                  "fqcore's 'auto' setting for the kernels; threads='auto' for BLAS: one thread where "
                  "fqcore's own matrix product does the convolutions, else the cores other processes "
                  "leave free)")
FQCORE_MEMORY = ("memory: glibc's default policy; Session.run's arrays from fqcore's block cache (a freed "
                 "block of 16 KiB or more serves the next array of its size)")


# ---------------------------------------------------------------------------------------------------
# Shared by every worker process (numpy and the standard library only: the TF environment has no fqcore)


def mobilenet_v2_blocks():
    """(block number, input channels, expansion, output channels, stride, residual add?) per block."""
    cin, blocks = MNV2_STEM, []
    for i, (t, c, stride) in enumerate(MNV2_BLOCKS, 1):
        blocks.append((i, cin, t, c, stride, stride == 1 and c == cin))
        cin = c
    return blocks


def synthetic_images(n=MNV2_IMAGES, seed=0):
    """n 32x32x3 float32 images and int32 labels: a fixed random template per class, at half the scale of the
    unit noise added to it (learnable, not trivially)."""
    import numpy as np
    rng = np.random.Generator(np.random.PCG64(seed))
    templates = rng.standard_normal((CLASSES,) + MODELS["mobilenet_v2"]["shape"], dtype=np.float32)
    labels = rng.integers(0, CLASSES, n).astype(np.int32)
    noise = rng.standard_normal((n,) + MODELS["mobilenet_v2"]["shape"], dtype=np.float32)
    return (np.float32(0.5) * templates[labels] + noise).astype(np.float32), labels


def load_batches(path, batch):
    import numpy as np
    with np.load(path) as f:
        x, y = f["x"].astype(np.float32), f["y"].astype(np.int32)
    return [(x[i:i + batch], y[i:i + batch]) for i in range(0, len(x) - batch + 1, batch)]


def run_variants(steps_by_name, steps, repeats, warmup):
    """steps_by_name: {variant: step(k) -> loss as a float}. Warm-up steps, then `repeats` rounds; in each,
    every variant runs `steps` steps back to back, in alternating order from round to round."""
    entries = list(steps_by_name.items())
    first_loss = {}
    for name, step in entries:
        first_loss[name] = float(step(0))
        for k in range(1, warmup):
            step(k)
    samples = {name: [] for name, _ in entries}
    last_loss = {}
    for r in range(repeats):
        for name, step in (entries if r % 2 == 0 else entries[::-1]):
            start = time.perf_counter()
            for k in range(steps):
                loss = step(k)
            samples[name].append((time.perf_counter() - start) / steps * 1e3)
            last_loss[name] = float(loss)
    return {name: {"ms": samples[name], "first_loss": first_loss[name], "last_loss": last_loss[name]}
            for name, _ in entries}


# ---------------------------------------------------------------------------------------------------
# fqcore: the float graph and experimental_create_training_graph(quant_delay=0). The demo model is
# fqcore.demo.build_model; MobileNet-v2 is built here with fqcore.graph.layers.


def fqcore_mobilenet_v2(training=True, seed=0):
    """MobileNet-v2 (the docstring's table) in a fresh fqcore graph, TF-slim names (stem/, block<i>/expand,
    block<i>/depthwise, block<i>/project, block<i>/add, head/, pool, logits/). Returns
    (graph, images placeholder, labels placeholder, logits, loss)."""
    from fqcore import graph as G
    L = G.layers
    g = G.Graph()
    g.seed = seed
    with g.as_default():
        images = G.placeholder("float32", [None, *MODELS["mobilenet_v2"]["shape"]], name="images")
        labels = G.placeholder("int32", [None], name="labels")
        bn = dict(momentum=0.9, epsilon=1e-3, fused=True)
        x = L.conv2d(images, MNV2_STEM, 3, stride=2, activation="relu6", batch_norm=bn, is_training=training,
                     scope="stem")
        for i, cin, t, c, stride, residual in mobilenet_v2_blocks():
            with g.name_scope(f"block{i}"):
                y = L.conv2d(x, t * cin, 1, activation="relu6", batch_norm=bn, is_training=training,
                             scope="expand")
                y = L.depthwise_conv2d(y, 3, stride=stride, activation="relu6", batch_norm=bn,
                                       is_training=training, scope="depthwise")
                y = L.conv2d(y, c, 1, activation=None, batch_norm=bn, is_training=training, scope="project")
                x = G.add(x, y, name="add") if residual else y
        x = L.conv2d(x, MNV2_HEAD, 1, activation="relu6", batch_norm=bn, is_training=training, scope="head")
        x = L.global_avg_pool(x, scope="pool")
        logits = L.dense(x, CLASSES, scope="logits")
        loss = L.sparse_softmax_cross_entropy(labels, logits)
    return g, images, labels, logits, loss


def fqcore_mobilenet_v2_setup(quantized, learning_rate=LEARNING_RATE, seed=0):
    """fqcore_mobilenet_v2 ready to train, as fqcore.demo.training_setup does for the demo model: rewritten by
    experimental_create_training_graph(quant_delay=0) when quantized, momentum SGD, variables initialized in a
    new Session. Returns a fqcore.demo.TrainingSetup."""
    from fqcore import demo, quantize
    from fqcore import graph as G
    g, images, labels, logits, loss = fqcore_mobilenet_v2(training=True, seed=seed)
    if quantized:
        quantize.experimental_create_training_graph(g, quant_delay=0)
    with g.as_default():
        train_op = G.MomentumOptimizer(learning_rate, MOMENTUM).minimize(loss)
    session = G.Session(g)
    session.run(G.global_variables_initializer(g))
    return demo.TrainingSetup(g, session, images, labels, logits, loss, train_op,
                              g.get_collection(G.GraphKeys.UPDATE_OPS), learning_rate)


def worker_fqcore(batches, args):
    import numpy as np
    import fqcore
    from fqcore import demo
    setup = {"demo": lambda qat: demo.training_setup(quantized=qat, learning_rate=LEARNING_RATE),  # momentum 0.9
             "mobilenet_v2": fqcore_mobilenet_v2_setup}[args.model]

    def make(qat):
        t = setup(qat)
        feeds = [{t.images: x, t.labels: y} for x, y in batches]
        fetches = [t.train_op, t.updates, t.loss]
        n_ops[qat] = len(t.graph.get_operations())
        return lambda k: t.session.run(fetches, feeds[k % len(feeds)])[2]

    n_ops = {}
    steps = {"fqcore float": make(False), "fqcore QAT": make(True)}
    results = run_variants(steps, args.steps, args.repeats, args.warmup)
    results["fqcore float"]["detail"] = f"Session, {n_ops[False]} graph ops"
    results["fqcore QAT"]["detail"] = (f"experimental_create_training_graph(quant_delay=0), "
                                       f"{n_ops[True]} graph ops")
    return {"framework": f"fqcore {fqcore.__version__} (ISA {fqcore.get_isa()}), numpy {np.__version__}",
            "threads": FQCORE_THREADS + "; " + FQCORE_MEMORY, "variants": results}


# ---------------------------------------------------------------------------------------------------
# TensorFlow: tf.compat.v1 graph + session (float), tf_keras + tfmot quantize_model (QAT)


def tf_keras_demo(K):
    """The demo model as a tf_keras functional model, fused batch norm (tfmot folds these patterns)."""
    L = K.layers

    def bn(x):
        return L.BatchNormalization(momentum=0.9, epsilon=1e-3, fused=True)(x)

    images = K.Input((8, 8, 1), name="images")
    x = L.ReLU(6.0)(bn(L.Conv2D(32, 3, padding="same", use_bias=False, name="conv1")(images)))
    y = L.ReLU(6.0)(bn(L.DepthwiseConv2D(3, padding="same", use_bias=False, name="block1_dw")(x)))
    y = bn(L.Conv2D(32, 1, use_bias=False, name="block1_pw")(y))
    x = L.ReLU(6.0)(L.Add()([y, x]))
    x = L.ReLU(6.0)(bn(L.Conv2D(64, 3, strides=2, padding="same", use_bias=False, name="conv2")(x)))
    x = L.GlobalAveragePooling2D()(x)
    logits = L.Dense(10, name="logits")(x)
    return K.Model(images, logits)


def tf_keras_mobilenet_v2(K):
    """MobileNet-v2 (the docstring's table) as a tf_keras functional model, fused batch norm."""
    L = K.layers

    def bn(x, name):
        return L.BatchNormalization(momentum=0.9, epsilon=1e-3, fused=True, name=name + "_bn")(x)

    images = K.Input(MODELS["mobilenet_v2"]["shape"], name="images")
    x = L.ReLU(6.0)(bn(L.Conv2D(MNV2_STEM, 3, strides=2, padding="same", use_bias=False, name="stem")(images),
                       "stem"))
    for i, cin, t, c, stride, residual in mobilenet_v2_blocks():
        name = f"block{i}"
        y = L.ReLU(6.0)(bn(L.Conv2D(t * cin, 1, use_bias=False, name=name + "_expand")(x), name + "_expand"))
        y = L.ReLU(6.0)(bn(L.DepthwiseConv2D(3, strides=stride, padding="same", use_bias=False,
                                             name=name + "_depthwise")(y), name + "_depthwise"))
        y = bn(L.Conv2D(c, 1, use_bias=False, name=name + "_project")(y), name + "_project")
        x = L.Add(name=name + "_add")([x, y]) if residual else y
    x = L.ReLU(6.0)(bn(L.Conv2D(MNV2_HEAD, 1, use_bias=False, name="head")(x), "head"))
    x = L.GlobalAveragePooling2D()(x)
    logits = L.Dense(CLASSES, name="logits")(x)
    return K.Model(images, logits)


def tf_v1_bn(v1, x, scope):
    return v1.layers.batch_normalization(x, momentum=0.9, epsilon=1e-3, fused=True, training=True,
                                         name=scope + "/BatchNorm")


def tf_v1_demo(tf, images):
    """The demo model's logits in tf.compat.v1: v1 layers (conv, fused batch norm, dense), tf.nn.depthwise_conv2d."""
    v1 = tf.compat.v1
    x = tf.nn.relu6(tf_v1_bn(v1, v1.layers.conv2d(images, 32, 3, padding="same", use_bias=False, name="conv1"),
                             "conv1"))
    with v1.variable_scope("block1"):
        w = v1.get_variable("dw/depthwise_weights", [3, 3, 32, 1], initializer=v1.initializers.he_normal())
        y = tf.nn.relu6(tf_v1_bn(v1, tf.nn.depthwise_conv2d(x, w, [1, 1, 1, 1], "SAME"), "dw"))
        y = tf_v1_bn(v1, v1.layers.conv2d(y, 32, 1, use_bias=False, name="pw"), "pw")
        x = tf.nn.relu6(y + x)
    x = tf.nn.relu6(tf_v1_bn(v1, v1.layers.conv2d(x, 64, 3, strides=2, padding="same", use_bias=False,
                                                  name="conv2"), "conv2"))
    x = tf.reduce_mean(x, axis=[1, 2])
    return v1.layers.dense(x, 10, name="logits")


def tf_v1_mobilenet_v2(tf, images):
    """MobileNet-v2's logits (the docstring's table) in tf.compat.v1, the same layers as tf_v1_demo uses."""
    v1 = tf.compat.v1

    def conv(x, filters, kernel, stride, name):
        return tf_v1_bn(v1, v1.layers.conv2d(x, filters, kernel, strides=stride, padding="same", use_bias=False,
                                             name=name), name)

    x = tf.nn.relu6(conv(images, MNV2_STEM, 3, 2, "stem"))
    for i, cin, t, c, stride, residual in mobilenet_v2_blocks():
        with v1.variable_scope(f"block{i}"):
            y = tf.nn.relu6(conv(x, t * cin, 1, 1, "expand"))
            w = v1.get_variable("depthwise/depthwise_weights", [3, 3, t * cin, 1],
                                initializer=v1.initializers.he_normal())
            y = tf.nn.relu6(tf_v1_bn(v1, tf.nn.depthwise_conv2d(y, w, [1, stride, stride, 1], "SAME"),
                                     "depthwise"))
            y = conv(y, c, 1, 1, "project")
            x = x + y if residual else y
    x = tf.nn.relu6(conv(x, MNV2_HEAD, 1, 1, "head"))
    x = tf.reduce_mean(x, axis=[1, 2])
    return v1.layers.dense(x, CLASSES, name="logits")


def tf_v1_float_step(tf, batches, model):
    """tf.compat.v1 graph mode: `model`'s layers, MomentumOptimizer; one Session.run per step fetching
    [train_op, UPDATE_OPS, loss], as fqcore's."""
    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        images = v1.placeholder(tf.float32, [None, *MODELS[model]["shape"]], name="images")
        labels = v1.placeholder(tf.int32, [None], name="labels")
        logits = {"demo": tf_v1_demo, "mobilenet_v2": tf_v1_mobilenet_v2}[model](tf, images)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
        train_op = v1.train.MomentumOptimizer(LEARNING_RATE, MOMENTUM).minimize(loss)
        updates = v1.get_collection(v1.GraphKeys.UPDATE_OPS)
        init = v1.global_variables_initializer()
        n_ops = len(graph.get_operations())
    session = v1.Session(graph=graph)
    session.run(init)
    feeds = [{images: x, labels: y} for x, y in batches]
    fetches = [train_op, updates, loss]
    return (lambda k: session.run(fetches, feeds[k % len(feeds)])[2]), n_ops


def tf_keras_step(tf, K, model, batches):
    """A tf.function train step (GradientTape, SGD with momentum) on a tf_keras model."""
    optimizer = K.optimizers.SGD(LEARNING_RATE, momentum=MOMENTUM)
    loss_fn = K.losses.SparseCategoricalCrossentropy(from_logits=True)
    variables = model.trainable_variables

    @tf.function
    def train(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    data = [(tf.constant(x), tf.constant(y)) for x, y in batches]
    return lambda k: train(*data[k % len(data)]).numpy()


def worker_tf(batches, args):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ["TF_USE_LEGACY_KERAS"] = "1"     # tf.compat.v1.layers and tfmot need Keras 2 (tf_keras)
    import warnings
    warnings.filterwarnings("ignore")
    import tensorflow as tf
    tf.get_logger().setLevel("ERROR")
    import tf_keras as K
    tf.config.set_visible_devices([], "GPU")
    keras_model = {"demo": tf_keras_demo, "mobilenet_v2": tf_keras_mobilenet_v2}[args.model]
    onednn = os.environ.get("TF_ENABLE_ONEDNN_OPTS")
    label = "oneDNN" if onednn is None or onednn.lower() not in ("0", "false") else "Eigen"
    float_step, n_ops = tf_v1_float_step(tf, batches, args.model)
    steps = {f"TF float, v1 Session ({label})": float_step}
    details = {f"TF float, v1 Session ({label})": f"tf.compat.v1.layers + MomentumOptimizer, {n_ops} graph ops"}
    steps[f"TF float, tf_keras tf.function ({label})"] = tf_keras_step(tf, K, keras_model(K), batches)
    details[f"TF float, tf_keras tf.function ({label})"] = "GradientTape + SGD(momentum=0.9)"
    versions = f"TensorFlow {tf.__version__}, tf_keras {K.__version__}"
    try:
        import tensorflow_model_optimization as tfmot
    except ImportError as error:
        qat_note = f"tfmot not installed ({error})"
    else:
        qmodel = tfmot.quantization.keras.quantize_model(keras_model(K))
        steps[f"TF QAT, tfmot quantize_model ({label})"] = tf_keras_step(tf, K, qmodel, batches)
        details[f"TF QAT, tfmot quantize_model ({label})"] = "default 8-bit scheme, tf.function step"
        versions += f", tensorflow-model-optimization {tfmot.__version__}"
        qat_note = None
    results = run_variants(steps, args.steps, args.repeats, args.warmup)
    for name, text in details.items():
        results[name]["detail"] = text
    threads = (f"intra-op {tf.config.threading.get_intra_op_parallelism_threads()}, inter-op "
               f"{tf.config.threading.get_inter_op_parallelism_threads()} (0 = TF's default: one per core)")
    return {"framework": versions, "threads": threads, "variants": results, "note": qat_note,
            "onednn": onednn}


# ---------------------------------------------------------------------------------------------------
# PyTorch: nn.Module eager (float; channels_last) and torch.ao.quantization eager-mode QAT


def torch_bn(torch, c):
    return torch.nn.BatchNorm2d(c, eps=1e-3, momentum=0.1)     # torch's momentum = 1 - TF's


def torch_demo(torch):
    """The demo model as an nn.Module, and the [conv, bn] module pairs eager QAT fuses."""
    nn = torch.nn
    from torch.ao.quantization import DeQuantStub, QuantStub

    class DemoNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.quant = QuantStub()
            self.conv1, self.bn1, self.relu1 = (nn.Conv2d(1, 32, 3, padding=1, bias=False), torch_bn(torch, 32),
                                                nn.ReLU6())
            self.dw = nn.Conv2d(32, 32, 3, padding=1, groups=32, bias=False)
            self.bn_dw, self.relu_dw = torch_bn(torch, 32), nn.ReLU6()
            self.pw, self.bn_pw = nn.Conv2d(32, 32, 1, bias=False), torch_bn(torch, 32)
            self.add = torch.ao.nn.quantized.FloatFunctional()
            self.relu_add = nn.ReLU6()
            self.conv2 = nn.Conv2d(32, 64, 3, stride=2, padding=1, bias=False)
            self.bn2, self.relu2 = torch_bn(torch, 64), nn.ReLU6()
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(64, 10)
            self.dequant = DeQuantStub()

        def forward(self, x):
            x = self.relu1(self.bn1(self.conv1(self.quant(x))))
            y = self.relu_dw(self.bn_dw(self.dw(x)))
            y = self.bn_pw(self.pw(y))
            x = self.relu_add(self.add.add(y, x))
            x = self.relu2(self.bn2(self.conv2(x)))
            return self.dequant(self.fc(torch.flatten(self.pool(x), 1)))

    return DemoNet(), [["conv1", "bn1"], ["dw", "bn_dw"], ["pw", "bn_pw"], ["conv2", "bn2"]]


def torch_mobilenet_v2(torch):
    """MobileNet-v2 (the docstring's table) as an nn.Module, and the [conv, bn] module pairs eager QAT fuses."""
    nn = torch.nn
    from torch.ao.quantization import DeQuantStub, QuantStub

    class InvertedResidual(nn.Module):
        def __init__(self, cin, t, c, stride, residual):
            super().__init__()
            hidden = t * cin
            self.expand, self.expand_bn, self.expand_relu = (nn.Conv2d(cin, hidden, 1, bias=False),
                                                             torch_bn(torch, hidden), nn.ReLU6())
            self.depthwise = nn.Conv2d(hidden, hidden, 3, stride=stride, padding=1, groups=hidden, bias=False)
            self.depthwise_bn, self.depthwise_relu = torch_bn(torch, hidden), nn.ReLU6()
            self.project, self.project_bn = nn.Conv2d(hidden, c, 1, bias=False), torch_bn(torch, c)
            self.add = torch.ao.nn.quantized.FloatFunctional() if residual else None

        def forward(self, x):
            y = self.expand_relu(self.expand_bn(self.expand(x)))
            y = self.depthwise_relu(self.depthwise_bn(self.depthwise(y)))
            y = self.project_bn(self.project(y))
            return self.add.add(x, y) if self.add is not None else y

    class MobileNetV2(nn.Module):
        def __init__(self):
            super().__init__()
            self.quant = QuantStub()
            self.stem, self.stem_bn, self.stem_relu = (nn.Conv2d(3, MNV2_STEM, 3, stride=2, padding=1, bias=False),
                                                       torch_bn(torch, MNV2_STEM), nn.ReLU6())
            self.blocks = nn.Sequential(*(InvertedResidual(cin, t, c, stride, residual)
                                          for _, cin, t, c, stride, residual in mobilenet_v2_blocks()))
            self.head, self.head_bn, self.head_relu = (nn.Conv2d(MNV2_BLOCKS[-1][1], MNV2_HEAD, 1, bias=False),
                                                       torch_bn(torch, MNV2_HEAD), nn.ReLU6())
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(MNV2_HEAD, CLASSES)
            self.dequant = DeQuantStub()

        def forward(self, x):
            x = self.stem_relu(self.stem_bn(self.stem(self.quant(x))))
            x = self.head_relu(self.head_bn(self.head(self.blocks(x))))
            return self.dequant(self.fc(torch.flatten(self.pool(x), 1)))

    pairs = [["stem", "stem_bn"], ["head", "head_bn"]]
    for k in range(len(MNV2_BLOCKS)):
        pairs += [[f"blocks.{k}.{layer}", f"blocks.{k}.{layer}_bn"] for layer in ("expand", "depthwise", "project")]
    return MobileNetV2(), pairs


def torch_model(torch, qat, model="demo"):
    net, conv_bn = {"demo": torch_demo, "mobilenet_v2": torch_mobilenet_v2}[model](torch)
    net.train()
    if qat:
        aq = torch.ao.quantization
        torch.backends.quantized.engine = "x86"
        net.qconfig = aq.get_default_qat_qconfig("x86")
        # Eager fusion knows conv+bn(+ReLU), not ReLU6: the ReLU6s stay separate modules.
        aq.fuse_modules_qat(net, conv_bn, inplace=True)
        aq.prepare_qat(net, inplace=True)
    return net


def torch_step(torch, model, batches, channels_last=False):
    import torch.nn.functional as F
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt)
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM)
    data = [(torch.from_numpy(x).permute(0, 3, 1, 2).contiguous(memory_format=fmt),
             torch.from_numpy(y).long()) for x, y in batches]

    def step(k):
        x, y = data[k % len(data)]
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.item()
    return step


def worker_torch(batches, args):
    import torch
    torch.set_num_threads(2)
    model = args.model
    steps = {"PyTorch float": torch_step(torch, torch_model(torch, False, model), batches),
             "PyTorch float, channels_last": torch_step(torch, torch_model(torch, False, model), batches, True),
             "PyTorch QAT, eager prepare_qat": torch_step(torch, torch_model(torch, True, model), batches)}
    results = run_variants(steps, args.steps, args.repeats, args.warmup)
    results["PyTorch float"]["detail"] = "nn.Module, eager, NCHW"
    results["PyTorch float, channels_last"]["detail"] = "nn.Module, eager, NHWC memory format"
    results["PyTorch QAT, eager prepare_qat"]["detail"] = (
        "fuse_modules_qat conv+bn, x86 default QAT qconfig, NCHW")
    return {"framework": f"PyTorch {torch.__version__}",
            "threads": f"torch.set_num_threads(2); inter-op {torch.get_num_interop_threads()}",
            "variants": results}


WORKERS = {"fqcore": worker_fqcore, "tf": worker_tf, "torch": worker_torch}


def worker_main(args):
    """Runs one framework's variants and prints the result as one tagged JSON line."""
    batches = load_batches(args.data, MODELS[args.model]["batch"])
    try:
        result = WORKERS[args.worker](batches, args)
    except ImportError as error:
        result = {"missing": f"not installed ({error})"}
    print(RESULT_TAG + json.dumps(result), flush=True)
    return 0


# ---------------------------------------------------------------------------------------------------
# The driver


def load_average():
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


def run_worker(python, name, model, data, steps, warmup, args, env=None):
    """(result dict, None) or (None, why it was not measured). env: variables to set (None: to unset)."""
    if python is None:
        return None, "skipped"
    child_env = dict(os.environ)
    for key, value in (env or {}).items():      # None: unset
        if value is None:
            child_env.pop(key, None)
        else:
            child_env[key] = value
    command = [python, os.path.abspath(__file__), "--worker", name, "--model", model, "--data", data,
               "--steps", str(steps), "--repeats", str(args.repeats), "--warmup", str(warmup)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=child_env)
    except OSError as error:
        return None, f"not installed ({python}: {error.strerror})"
    for line in done.stdout.splitlines():
        if line.startswith(RESULT_TAG):
            result = json.loads(line[len(RESULT_TAG):])
            if "missing" in result:
                return None, result["missing"]
            return result, None
    tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
    return None, f"failed (exit {done.returncode}: {tail})"


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def model_data(model):
    """(x, y, a line describing them) of `model`'s training data."""
    import numpy as np
    from fqcore.datasets import load_digits
    batch = MODELS[model]["batch"]
    if model == "demo":
        data = load_digits()
        return (data.x_train.astype(np.float32).reshape(-1, 8, 8, 1), data.y_train.astype(np.int32),
                f"batch {batch} of 8x8x1 digits ({len(data.x_train)} training images, consecutive batches)")
    x, y = synthetic_images()
    return x, y, (f"batch {batch} of synthetic 32x32x3 images in {CLASSES} classes ({len(x)} images, a template "
                  "per class + noise, seed 0; consecutive batches)")


def measure_model(model, args, jobs, tmp):
    """Runs every framework's worker on `model`; prints its section; returns what --json records."""
    import numpy as np
    steps = args.steps or MODELS[model]["steps"]
    warmup = args.warmup or MODELS[model]["warmup"]
    x, y, described = model_data(model)
    print(f"\n## {MODELS[model]['title']} ({model})\n")
    print(f"- {described[0].upper() + described[1:]}, momentum {MOMENTUM} SGD at {LEARNING_RATE}; {warmup} "
          f"warm-up steps, then {args.repeats} repeats of {steps} steps per variant, interleaved within each "
          "process; reported: the median over repeats (and the range) of ms per step")
    path = os.path.join(tmp, f"{model}.npz")
    np.savez(path, x=x, y=y)
    rows, notes, results, variants = [], [], {}, {}
    for name, python, env in jobs:
        load = load_average()
        result, why = run_worker(python, name, model, path, steps, warmup, args, env)
        title = {"fqcore": "fqcore", "torch": "PyTorch",
                 "tf": "TensorFlow" + (" (TF_ENABLE_ONEDNN_OPTS=0)" if env.get("TF_ENABLE_ONEDNN_OPTS")
                                       else " (default: oneDNN)")}[name]
        if result is None:
            if name == "tf" and python is None:
                why = "skipped (no --tf-python)"
            rows.append([title, why, "", "", "", ""])
            continue
        notes.append(f"- {title}: {result['framework']}; threads: {result['threads']}"
                     + (f"; load average when it started: {load:.2f}" if load is not None else ""))
        if result.get("note"):
            notes.append(f"  ({result['note']})")
        results[title] = result
        variants.update(result["variants"])

    reference = variants.get("fqcore QAT")
    ref_ms = statistics.median(reference["ms"]) if reference else None
    measured = []
    for variant, r in variants.items():
        med = statistics.median(r["ms"])
        relative = f"{med / ref_ms:.2f}x" if ref_ms else "n/a"
        measured.append([variant, f"{med:.2f}", f"{min(r['ms']):.2f}-{max(r['ms']):.2f}", relative,
                         f"{r['first_loss']:.2f} -> {r['last_loss']:.2f}", r.get("detail", "")])
    print("\n".join(notes) + "\n")
    print(table(["variant", "ms/step", "range", "relative to fqcore QAT", "loss: first -> last", "how"],
                measured + rows))
    return {"steps": steps, "warmup": warmup, "not_measured": {r[0]: r[1] for r in rows}, "frameworks": results}


def driver_main(args):
    try:
        import fqcore.datasets  # noqa: F401
    except ImportError as error:
        print(f"fqcore is not importable in {sys.executable}: {error}", file=sys.stderr)
        return 1
    models = list(MODELS) if args.model == "both" else [args.model]
    print("# " + (MODELS[models[0]]["title"] if len(models) == 1 else "Training steps")
          + ": fqcore vs TensorFlow vs PyTorch\n")
    load = load_average()
    load = "" if load is None else f"; 1-minute load average at the start: {load:.2f}"
    print(f"- CPU: {cpu_model()}, {os.cpu_count()} logical CPUs; Python {platform.python_version()}{load} "
          "(other busy processes skew every figure)")
    jobs = [("fqcore", sys.executable, {})]
    if not args.no_torch:
        jobs.append(("torch", sys.executable, {}))
    onednn = {"both": ["0", None], "off": ["0"], "on": [None]}[args.tf_onednn]
    for value in onednn:
        jobs.append(("tf", args.tf_python, {"TF_ENABLE_ONEDNN_OPTS": value}))

    recorded = {}
    with tempfile.TemporaryDirectory() as tmp:
        for model in models:
            recorded[model] = measure_model(model, args, jobs, tmp)
    print("\nrelative to fqcore QAT = the variant's median ms/step / fqcore QAT's (below 1: faster than fqcore QAT).")
    print("Fake-quant semantics differ. fqcore is contrib.quantize's rewrite: batch norm folded into the "
          "weights (with contrib's corrections), per-tensor last-value weight ranges, EMA activation ranges. "
          "tfmot's default 8-bit scheme does not fold: it fake-quantizes the unfolded conv weights (per channel, "
          "symmetric) and the output after batch norm + ReLU6. PyTorch's eager QAT (x86 qconfig) fuses conv+bn "
          "into ConvBn2d (folded weights, per-channel symmetric) but cannot fuse ReLU6, so it fake-quantizes the "
          "conv+bn output and each ReLU6 output, with 7-bit activation ranges (reduce_range) and its own "
          "fused observer + fake-quant op.")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "models": recorded}, f, indent=1)
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=[*MODELS, "both"], default="both",
                        help="which model's training step: demo, mobilenet_v2 or both (default)")
    parser.add_argument("--tf-python", metavar="PYTHON",
                        help="a Python with TensorFlow (+ tf_keras, tensorflow-model-optimization), e.g. "
                             "/opt/tfenv/bin/python; without it TensorFlow is skipped")
    parser.add_argument("--tf-onednn", choices=["both", "on", "off"], default="both",
                        help="TF runs: with TF_ENABLE_ONEDNN_OPTS=0 (off, Eigen kernels), TF's default "
                             "(on, oneDNN), or both (default)")
    parser.add_argument("--no-torch", action="store_true", help="skip PyTorch")
    parser.add_argument("--steps", type=int, help="timed steps per repeat (default: 100 for demo, 20 for "
                                                  "mobilenet_v2)")
    parser.add_argument("--repeats", type=int, default=7, help="repeats per variant (default 7)")
    parser.add_argument("--warmup", type=int, help="untimed steps first (default: 20 for demo, 5 for mobilenet_v2)")
    parser.add_argument("--json", metavar="FILE", help="also write every measurement to FILE")
    parser.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name in ("steps", "repeats", "warmup"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1")
    if args.worker:
        if args.model not in MODELS:
            parser.error("a worker runs one model")
        return worker_main(args)
    return driver_main(args)


if __name__ == "__main__":
    sys.exit(main())
