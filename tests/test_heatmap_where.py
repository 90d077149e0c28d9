"""A heatmap of a tensor of three or more axes shows where along its last two: a slip along a
sequence's positions or an image's columns stays a column, whatever the batch does."""

from __future__ import annotations

import torch

from tutor.core.grading import heatmap
from tutor.ui.widgets.heatmap import Heatmap


def test_the_last_two_axes_are_kept_and_the_leading_ones_folded():
    diff = torch.zeros(32, 64, 8)
    diff[5, :, 7] = 1.0  # one example's last position, every channel
    diff[9, 3, 0] = -2.0
    cells = heatmap(diff)
    assert len(cells) == 8 and len(cells[0]) == 8  # 64 channels pooled to 8 rows, 8 positions
    assert all(row[7] == 1.0 for row in cells)  # the last position, in every row
    assert cells[0][0] == 2.0 and cells[1][0] == 0.0


def test_the_picture_says_what_was_folded():
    from rich.console import Console

    console = Console(width=78, record=True, color_system=None)
    console.print(Heatmap([[0.0, 1.0]] * 4, shape=[32, 64, 8]))
    said = console.export_text()
    assert "64 rows × 8 columns" in said and "largest over dim 0" in said
