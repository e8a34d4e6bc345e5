"""The shared training loop and the run store."""

from studylib.training.loop import TrainConfig, train
from studylib.training.runstore import Run, RunStore

__all__ = ["TrainConfig", "train", "Run", "RunStore"]
