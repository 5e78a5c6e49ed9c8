"""Batch-norm folding (contrib's FoldBatchNorms): fused batch norms first, then unfused ones."""
from . import fold_fused, fold_unfused


def fold_batch_norms(graph, is_training, freeze_bn_delay=None):
    """Folds every matched batch norm in place."""
    fold_fused.fold(graph, is_training, freeze_bn_delay)
    fold_unfused.fold(graph, is_training, freeze_bn_delay)
