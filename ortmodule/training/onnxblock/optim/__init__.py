from ortmodule.training.onnxblock.optim.optim import SGD, AdamW, ClipGradNorm

__all__ = ["SGD", "AdamW", "ClipGradNorm"]
