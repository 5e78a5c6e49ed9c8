"""fqcore: TensorFlow-exact fake quantization for quantization-aware training on the CPU."""
from . import _runtime
from .array_memory import cached_memory, release_cached_memory
from ._runtime import (available_isas, compiled_isas, free_cpus, get_isa, get_num_threads,
                       other_cpu_load, set_isa, set_num_threads, show_config, usable_cpus,
                       workers_awake)
from .batch_norm import (FusedBatchNormGradV3, FusedBatchNormV3, fused_batch_norm,
                         fused_batch_norm_grad)
from .ops import (FakeQuantWithMinMaxVarsGradient, FakeQuantWithMinMaxVarsPerChannelGradient,
                  fake_quant_with_min_max_args, fake_quant_with_min_max_args_gradient,
                  fake_quant_with_min_max_vars, fake_quant_with_min_max_vars_gradient,
                  fake_quant_with_min_max_vars_per_channel,
                  fake_quant_with_min_max_vars_per_channel_gradient)
from .quantizers import (AllValuesQuantizer, FixedQuantizer, LastValueQuantizer,
                         MovingAverageQuantizer, NoQuantizer, Quantizer)
from .serialization import (deserialize, from_json, load_quantizer, register_quantizer,
                            save_quantizer, serialize, to_json)

_runtime._init_from_environment()

__version__ = _runtime.config()["version"]

__all__ = [
    "available_isas", "compiled_isas", "get_isa", "set_isa", "get_num_threads", "set_num_threads",
    "usable_cpus", "other_cpu_load", "free_cpus", "show_config", "FakeQuantWithMinMaxVarsGradient", "FakeQuantWithMinMaxVarsPerChannelGradient",
    "fake_quant_with_min_max_args", "fake_quant_with_min_max_args_gradient",
    "fake_quant_with_min_max_vars", "fake_quant_with_min_max_vars_gradient",
    "fake_quant_with_min_max_vars_per_channel", "fake_quant_with_min_max_vars_per_channel_gradient",
    "FusedBatchNormV3", "FusedBatchNormGradV3", "fused_batch_norm", "fused_batch_norm_grad",
    "Quantizer", "LastValueQuantizer", "MovingAverageQuantizer", "AllValuesQuantizer",
    "FixedQuantizer", "NoQuantizer", "serialize", "deserialize", "register_quantizer", "to_json",
    "from_json", "save_quantizer", "load_quantizer", "cached_memory", "release_cached_memory",
    "workers_awake",
]
