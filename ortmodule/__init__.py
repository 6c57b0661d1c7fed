"""ortmodule: train any torch.nn.Module on the ortmodule engine.

    from ortmodule import ORTModule
    model = ORTModule(MyModel())
"""

from ortmodule import optim
from ortmodule.capture.common import ExportError
from ortmodule.module import ORTModule
from ortmodule.options import DebugOptions, FallbackPolicy, LogLevel
from ortmodule.profiling import ProfileReport, profile

__all__ = ["DebugOptions", "ExportError", "FallbackPolicy", "LogLevel", "ORTModule",
           "ProfileReport", "optim", "profile"]
__version__ = "0.1.0"
