"""asv benchmarks of fqcore.graph: a training step of the demo's model and of a MobileNet-v2 (float and
after experimental_create_training_graph), the rewrite itself, and an evaluation pass of the eval graph.
tools/profile_demo_step.py splits one step's time between the engine and the kernels."""
from fqcore import demo, quantize
from fqcore import graph as G
from fqcore.datasets import load_digits

try:  # imported by asv, benchmarks/ is a package; run from benchmarks/, it is on sys.path
    from .compare_training import MODELS, fqcore_mobilenet_v2_setup, synthetic_images
except ImportError:
    from compare_training import MODELS, fqcore_mobilenet_v2_setup, synthetic_images

BATCHES = [64, 256]
MODES = ["float", "qat"]


class TimeTrainingStep:
    """One Session.run of the train op, the batch-norm updates and the loss."""

    params = [MODES, BATCHES]
    param_names = ["mode", "batch"]
    timeout = 300

    def setup(self, mode, batch):
        data = load_digits()
        t = demo.training_setup(quantized=mode == "qat", learning_rate=0.01)
        self.session, self.loss, self.train_op, self.updates = t.session, t.loss, t.train_op, t.updates
        self.feed = {t.images: data.x_train[:batch], t.labels: data.y_train[:batch]}
        self.session.run([self.train_op, self.updates, self.loss], self.feed)  # plan built

    def time_step(self, mode, batch):
        self.session.run([self.train_op, self.updates, self.loss], self.feed)


class TimeMobileNetV2Step:
    """As TimeTrainingStep, on compare_training.py's MobileNet-v2 (width 0.5, 32x32x3, batch 32 of its
    synthetic images): an edge-training-sized network of inverted residual blocks."""

    params = [MODES]
    param_names = ["mode"]
    timeout = 300

    def setup(self, mode):
        x, y = synthetic_images()
        batch = MODELS["mobilenet_v2"]["batch"]
        t = fqcore_mobilenet_v2_setup(quantized=mode == "qat")
        self.session, self.loss, self.train_op, self.updates = t.session, t.loss, t.train_op, t.updates
        self.feed = {t.images: x[:batch], t.labels: y[:batch]}
        self.session.run([self.train_op, self.updates, self.loss], self.feed)  # plan built

    def time_step(self, mode):
        self.session.run([self.train_op, self.updates, self.loss], self.feed)


class TimeRewrite:
    """experimental_create_training_graph on the demo model (folding + insertion)."""

    timeout = 120

    def time_rewrite(self):
        g = demo.build_model(training=True)[0]
        quantize.experimental_create_training_graph(g, quant_delay=100, freeze_bn_delay=200)


class TimeEvaluation:
    """The fake-quantized eval graph on the 359 held-out digits (one run)."""

    timeout = 120

    def setup(self):
        data = load_digits()
        g, images, labels, self.logits, loss = demo.build_model(training=False)
        quantize.experimental_create_eval_graph(g)
        self.session = G.Session(g)
        self.session.run(G.global_variables_initializer(g))
        self.feed = {images: data.x_test}
        self.session.run(self.logits, self.feed)

    def time_eval(self):
        self.session.run(self.logits, self.feed)

