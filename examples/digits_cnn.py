"""The CNN of the digits example, shared with benchmarks/bench_train_step.py."""

import torch
from torch import nn


class DigitsCNN(nn.Module):
    """Two conv blocks and a linear classifier; `image_size` must be divisible by 4."""

    def __init__(self, channels: int = 16, image_size: int = 8, num_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, channels, 3, padding=1),
            nn.BatchNorm2d(channels),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(channels, 2 * channels, 3, padding=1),
            nn.BatchNorm2d(2 * channels),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        side = image_size // 4
        self.classifier = nn.Sequential(
            nn.Dropout(0.1),
            nn.Flatten(),
            nn.Linear(2 * channels * side * side, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [batch, 1, image_size, image_size]
        return self.classifier(self.features(x))
