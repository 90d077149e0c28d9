"""2-D CNN lesson (cnn2d_pack, made from tests/packs/forward/slips_cnn2d.py): a second held-out
corpus of learners' slips.

What it is: right and wrong backward-pass code for every step of the lesson, each wrong entry a
slip a learner is likely to make (cross-entropy normalised over the wrong axis, pooled maps
un-flattened in the wrong order, max-pool gradient spread, doubled or split at ties, sent to a
fixed corner, to the map's global max or picked on the wrong axis, ReLU slopes of the wrong
activation or at the wrong tensor, convolution taps transposed, flipped on one axis, cropped at
the wrong side, windows dilated or shifted, bias summed over the wrong axes, repeated characters
and their order lost in dC), with the words a specific diagnosis of it would use.

Style of this half, unlike both earlier halves: F.fold / F.unfold (col2im and im2col) with
torch.matmul, torch.rot90 for the flipped kernel, F.interpolate for upsampling the pooled gradient,
pooling windows as a reshaped and permuted view with argmax and one_hot, broadcasting with None,
unflatten / movedim, masked_fill, and python loops over context positions. Every entry is the
whole answer to its step.

It was written apart from the diagnosis code (without reading tutor/) and is measured, never tuned
on: only the verdicts were checked when it was written (each RIGHT passes, each WRONG does not);
the `words` are the author's own guess at what a specific diagnosis would say, and no rule of the
tutor may be shaped to match them.

RIGHT = {name: (step_id, tensor, code, "")}
WRONG = {name: (step_id, tensor, code, slip, words)}
"""
from textwrap import dedent

S = "cnn2d_pack/"
RIGHT: dict = {}
WRONG: dict = {}


def _ok(name, step, tensor, text):
    assert name not in RIGHT, name
    RIGHT[name] = (S + step, tensor, dedent(text).lstrip("\n"), "")


def _slip(name, step, tensor, text, slip, *words):
    assert name not in WRONG, name
    WRONG[name] = (S + step, tensor, dedent(text).lstrip("\n"), slip, tuple(w.lower() for w in words))


# The pooling windows of h as a last axis of 4, and back (row-major inside each window).
WINDOWS = """
    hb, wb = block_size // 2, n_embd // 2
    win = h.reshape(-1, n_maps, hb, 2, wb, 2).permute(0, 1, 2, 4, 3, 5).reshape(-1, n_maps, hb, wb, 4)
    """
UNWINDOW = """
    dh = pick.reshape(-1, n_maps, hb, wb, 2, 2).permute(0, 1, 2, 4, 3, 5).reshape(h.shape)
    """
# The input gradient as col2im: each output position's gradient spread over the taps it read.
FOLD_DIMG = """
    cols = torch.matmul(K.reshape(n_maps, -1).t(), dhpre.flatten(2))
    dimg = F.fold(cols, (block_size, n_embd), kernel_size, padding=1)
    """
UNFOLD_DK = """
    patches = F.unfold(img, kernel_size, padding=1)
    dK = torch.matmul(dhpre.flatten(2), patches.transpose(1, 2)).sum(0).reshape(K.shape)
    """
SUM_DKB = """
    dkb = dhpre.sum(3).sum(2).sum(0)
    """


def _img(dimg=FOLD_DIMG, dK=UNFOLD_DK, dkb=SUM_DKB):
    return "".join(dedent(part).lstrip("\n") for part in (dimg, dK, dkb))


# ---------------------------------------------------------------- right answers
_ok("logits_exp_over_sum", "logits", "logits", """
    E = logits.exp()
    dlogits = (E / E.sum(1, keepdim=True) - (torch.arange(vocab_size) == Yb[:, None]).float()) / n
    """)
_ok("flat_mm_broadcast", "flat", "W", """
    dflat = torch.mm(dlogits, W.t())
    dW = (flat[:, :, None] * dlogits[:, None, :]).sum(0)
    db = dlogits.sum(dim=0)
    """)
_ok("pooled_reshape", "pooled", "pooled", """
    dpooled = dflat.reshape(-1, n_maps, block_size // 2, n_embd // 2)
    """)
_ok("h_window_view_one_hot", "h", "h", WINDOWS + """
    pick = F.one_hot(win.argmax(-1), 4) * dpooled[..., None]
    """ + UNWINDOW)
_ok("h_unfold_fold", "h", "h", """
    cols = F.unfold(h, 2, stride=2).view(h.shape[0], n_maps, 4, -1)
    hit = F.one_hot(cols.argmax(2), 4).transpose(2, 3) * dpooled.flatten(2)[:, :, None, :]
    dh = F.fold(hit.reshape(h.shape[0], n_maps * 4, -1), h.shape[-2:], 2, stride=2)
    """)
_ok("pooled_unflatten", "pooled", "pooled", """
    dpooled = dflat.unflatten(1, (n_maps, block_size // 2, n_embd // 2))
    """)
_ok("h_first_hit_upsampled", "h", "h", WINDOWS + """
    first = F.one_hot(win.argmax(-1), 4).reshape(-1, n_maps, hb, wb, 2, 2)
    first = first.permute(0, 1, 2, 4, 3, 5).reshape(h.shape)
    dh = first * F.interpolate(dpooled, scale_factor=2, mode="nearest")
    """)
_ok("hpre_clamp_sign", "hpre", "hpre", """
    dhpre = dh * hpre.clamp(min=0).sign()
    """)
_ok("hpre_masked_fill", "hpre", "hpre", """
    dhpre = dh.masked_fill(hpre <= 0, 0.0)
    """)
_ok("img_fold_unfold", "img", "img", _img())
_ok("img_rot90_conv", "img", "kb", _img(dimg="""
    dimg = F.conv2d(dhpre, torch.rot90(K, 2, dims=(2, 3)).transpose(0, 1), padding=1)
    """, dkb="""
    dkb = dhpre.transpose(0, 1).reshape(n_maps, -1).sum(1)
    """))
_ok("img_fold_full_then_crop", "img", "img", _img(dimg="""
    cols = torch.matmul(K.flatten(1).t(), dhpre.flatten(2))
    dimg = F.fold(cols, (block_size + 2, n_embd + 2), kernel_size)[:, :, 1:-1, 1:-1]
    """))
_ok("emb_index_channel", "emb", "emb", """
    demb = dimg[:, 0]
    """)
_ok("C_loop_index_add", "C", "C", """
    dC = torch.zeros_like(C)
    for t in range(block_size):
        dC.index_add_(0, Xb[:, t], demb[:, t])
    """)

# ---------------------------------------------------------------- logits: cross-entropy
_slip("logits_divided_by_classes_too", "logits", "logits", """
    E = logits.exp()
    dlogits = (E / E.sum(1, keepdim=True) - (torch.arange(vocab_size) == Yb[:, None]).float()) / (n * vocab_size)
    """, "divided by n * vocab_size: the mean is over the examples only",
    "vocab", "class", "27", "divide", "count", "mean")
_slip("logits_softmax_over_batch", "logits", "logits", """
    E = logits.exp()
    dlogits = (E / E.sum(0, keepdim=True) - (torch.arange(vocab_size) == Yb[:, None]).float()) / n
    """, "softmax normalised over the batch (dim 0) instead of the classes",
    "axis", "dim", "softmax", "batch", "class", "column", "normalis", "normaliz")
_slip("logits_predictions_as_targets", "logits", "logits", """
    E = logits.exp()
    guess = logits.argmax(1)
    dlogits = (E / E.sum(1, keepdim=True) - (torch.arange(vocab_size) == guess[:, None]).float()) / n
    """, "one-hot of the predicted class (argmax) subtracted instead of the target's",
    "target", "yb", "label", "argmax", "prediction", "true")

# ---------------------------------------------------------------- flat: logits = flat @ W + b
_slip("flat_db_summed_over_classes", "flat", "b", """
    dflat = torch.mm(dlogits, W.t())
    dW = (flat[:, :, None] * dlogits[:, None, :]).sum(0)
    db = dlogits.sum(dim=1)
    """, "db summed over the classes instead of the batch (shape)",
    "axis", "dim", "batch", "sum", "shape", "class")
_slip("flat_dW_mean_over_batch", "flat", "W", """
    dflat = torch.mm(dlogits, W.t())
    dW = (flat[:, :, None] * dlogits[:, None, :]).mean(0)
    db = dlogits.sum(dim=0)
    """, "mean over the batch though dlogits already carries the 1/n",
    "mean", "sum", "batch", "average", "divide", "already", "twice")
_slip("flat_W_reshaped_not_transposed", "flat", "flat", """
    dflat = torch.mm(dlogits, W.reshape(vocab_size, -1))
    dW = (flat[:, :, None] * dlogits[:, None, :]).sum(0)
    db = dlogits.sum(dim=0)
    """, "W reshaped to (27, 128) where its transpose belongs",
    "reshape", "view", "transpose", ".t", "order", "permute")

# ---------------------------------------------------------------- pooled: flat = pooled.flatten(1)
_slip("pooled_channels_last_unflatten", "pooled", "pooled", """
    dpooled = dflat.unflatten(1, (block_size // 2, n_embd // 2, n_maps)).movedim(-1, 1)
    """, "un-flattened as if the maps were the last axis",
    "order", "axis", "axes", "channel", "layout", "flatten", "permute")
_slip("pooled_width_major_unflatten", "pooled", "pooled", """
    dpooled = dflat.unflatten(1, (n_maps, n_embd // 2, block_size // 2)).transpose(2, 3)
    """, "rows and columns of each map swapped when un-flattening",
    "transpose", "row", "column", "order", "height", "width", "swap")

# ---------------------------------------------------------------- h: pooled = max_pool2d(h, 2)
_slip("h_whole_window_gets_it", "h", "h", """
    dh = F.interpolate(dpooled, scale_factor=2, mode="nearest")
    """, "every entry of the window gets the window's whole gradient",
    "window", "every", "all", "spread", "max", "only", "argmax")
_slip("h_every_tied_max", "h", "h", """
    up = F.interpolate(pooled, scale_factor=2, mode="nearest")
    dh = (h == up).float() * F.interpolate(dpooled, scale_factor=2, mode="nearest")
    """, "every entry equal to the max gets the gradient: ties (all-zero windows) counted several times",
    "tie", "equal", "several", "duplicate", "once", "first")
_slip("h_ties_share", "h", "h", """
    up = F.interpolate(pooled, scale_factor=2, mode="nearest")
    hit = (h == up).float()
    share = F.interpolate(F.avg_pool2d(hit, 2) * 4, scale_factor=2, mode="nearest")
    dh = hit / share * F.interpolate(dpooled, scale_factor=2, mode="nearest")
    """, "the gradient shared among tied maxima instead of going to the first",
    "tie", "split", "share", "equal", "divide", "first")
_slip("h_top_right_corner", "h", "h", """
    dh = torch.zeros_like(h)
    dh[:, :, 0::2, 1::2] = dpooled
    """, "every window's gradient sent to its top-right entry, wherever the max was",
    "corner", "argmax", "max", "fixed", "position", "largest")
_slip("h_global_max_of_map", "h", "h", """
    top = h.flatten(2).argmax(-1, keepdim=True)
    dh = torch.zeros_like(h).flatten(2).scatter_(2, top, dpooled.flatten(2).sum(-1, keepdim=True)).view_as(h)
    """, "all of a map's gradient sent to the map's global max instead of each window's",
    "global", "window", "whole", "map", "each", "local")
_slip("h_argmax_across_windows", "h", "h", WINDOWS + """
    pick = F.one_hot(win.argmax(-2), 4) * dpooled[..., None]
    """ + UNWINDOW, "argmax taken across neighbouring windows (axis -2) instead of inside the window",
    "axis", "dim", "argmax", "window", "max")
_slip("h_fold_one_hot_not_transposed", "h", "h", """
    cols = F.unfold(h, 2, stride=2).view(h.shape[0], n_maps, 4, -1)
    hit = F.one_hot(cols.argmax(2), 4) * dpooled.flatten(2)[:, :, :, None]
    dh = F.fold(hit.reshape(h.shape[0], n_maps * 4, -1), h.shape[-2:], 2, stride=2)
    """, "window one-hots reshaped into fold's layout without the transpose: entries land in the wrong windows",
    "transpose", "layout", "order", "window", "reshape", "axes")

# ---------------------------------------------------------------- hpre: h = relu(hpre)
_slip("hpre_mask_inverted", "hpre", "hpre", """
    dhpre = dh.masked_fill(hpre > 0, 0.0)
    """, "gradient kept where hpre <= 0 and stopped where it was positive",
    "invert", "mask", "negative", "positive", "opposite", "relu")
_slip("hpre_sigmoid_slope", "hpre", "hpre", """
    s = torch.sigmoid(hpre)
    dhpre = dh * s * (1 - s)
    """, "sigmoid's slope s(1-s) used for a ReLU",
    "sigmoid", "relu", "slope", "derivative", "activation")
_slip("hpre_mask_from_image", "hpre", "hpre", """
    dhpre = dh * (img > 0)
    """, "ReLU mask taken from the convolution's input img instead of hpre",
    "img", "hpre", "input", "mask", "tensor", "conv")
_slip("hpre_clamped_value", "hpre", "hpre", """
    dhpre = dh * h.clamp(0, 1)
    """, "h clamped to [0, 1] used as the mask: values below 1 scale the gradient",
    "indicator", "mask", "clamp", "value", "slope", "0 or 1", "binary")
_slip("hpre_mask_from_gradient", "hpre", "hpre", """
    dhpre = dh * (dh > 0)
    """, "mask taken from the sign of the gradient dh instead of the input hpre",
    "dh", "gradient", "hpre", "input", "sign", "mask")

# ---------------------------------------------------------------- img, K, kb: conv2d
_slip("img_kernel_not_flipped", "img", "img", _img(dimg="""
    dimg = F.conv2d(dhpre, K.permute(1, 0, 2, 3), padding=1)
    """), "in/out channels swapped but the taps not flipped",
    "flip", "rotate", "180", "reverse", "kernel", "taps")
_slip("img_flipped_left_right_only", "img", "img", _img(dimg="""
    dimg = F.conv2d(dhpre, K.permute(1, 0, 2, 3).flip(-1), padding=1)
    """), "kernel flipped along its width only, not its height too",
    "flip", "both", "axis", "rotate", "180", "vertical", "horizontal")
_slip("img_taps_transposed", "img", "img", _img(dimg="""
    cols = torch.matmul(K.transpose(2, 3).reshape(n_maps, -1).t(), dhpre.flatten(2))
    dimg = F.fold(cols, (block_size, n_embd), kernel_size, padding=1)
    """), "the 3x3 taps transposed (rows for columns) before col2im",
    "transpose", "tap", "row", "column", "kernel", "swap")
_slip("img_kernel_reshaped_not_transposed", "img", "img", _img(dimg="""
    cols = torch.matmul(K.reshape(-1, n_maps), dhpre.flatten(2))
    dimg = F.fold(cols, (block_size, n_embd), kernel_size, padding=1)
    """), "K reshaped to (9, maps) instead of transposed: maps and taps scrambled",
    "reshape", "view", "transpose", "order", "channel", "tap")
_slip("img_crop_bottom_right_border", "img", "img", _img(dimg="""
    cols = torch.matmul(K.flatten(1).t(), dhpre.flatten(2))
    dimg = F.fold(cols, (block_size + 2, n_embd + 2), kernel_size)[:, :, 2:, 2:]
    """), "both padding rows and columns cropped from one side: the image is shifted by one",
    "crop", "pad", "side", "shift", "offset", "border", "edge")
_slip("K_dilated_windows", "img", "K", _img(dK="""
    patches = F.unfold(img, kernel_size, padding=2, dilation=2)
    dK = torch.matmul(dhpre.flatten(2), patches.transpose(1, 2)).sum(0).reshape(K.shape)
    """), "windows read with dilation 2 (padding 2) instead of adjacent taps",
    "dilation", "stride", "spacing", "window", "tap", "unfold")
_slip("K_windows_shifted", "img", "K", _img(dK="""
    patches = F.unfold(F.pad(img, (2, 0, 2, 0)), kernel_size)
    dK = torch.matmul(dhpre.flatten(2), patches.transpose(1, 2)).sum(0).reshape(K.shape)
    """), "padding put on the top and left only: every window shifted by one",
    "shift", "offset", "pad", "side", "window", "position")
_slip("K_taps_by_maps_reshaped", "img", "K", _img(dK="""
    patches = F.unfold(img, kernel_size, padding=1)
    dK = torch.matmul(patches, dhpre.flatten(2).transpose(1, 2)).sum(0).reshape(K.shape)
    """), "product taken as (taps, maps) and reshaped into (maps, taps): channels and taps mixed",
    "transpose", "order", "swap", "channel", "tap", "view", "reshape")
_slip("kb_summed_over_wrong_axes", "img", "kb", _img(dkb="""
    dkb = dhpre.sum(dim=(0, 1, 2))
    """), "summed over batch, maps and height, leaving width (8, like the maps)",
    "axis", "axes", "channel", "sum", "dim", "width", "map")
_slip("kb_mean_over_positions", "img", "kb", _img(dkb="""
    dkb = dhpre.mean((2, 3)).sum(0)
    """), "averaged over the 64 positions instead of summed",
    "mean", "sum", "position", "average", "divide", "64")

# ---------------------------------------------------------------- emb: img = emb.unsqueeze(1)
_slip("emb_divided_by_maps", "emb", "emb", """
    demb = dimg[:, 0] / n_maps
    """, "divided by the number of maps, as if the one input channel were copied into each",
    "channel", "map", "divide", "factor", "squeeze", "copy")
_slip("emb_height_width_swapped", "emb", "emb", """
    demb = dimg.reshape(-1, n_embd, block_size).transpose(1, 2)
    """, "reshaped as (width, height) and transposed: rows and columns of the image swapped",
    "transpose", "order", "axes", "swap", "row", "column", "height", "width")

# ---------------------------------------------------------------- C: emb = C[Xb]
_slip("C_loop_fancy_plus_equals", "C", "C", """
    dC = torch.zeros_like(C)
    for t in range(block_size):
        dC[Xb[:, t]] += demb[:, t]
    """, "dC[idx] += with repeated characters in a column: each counted once",
    "repeat", "duplicate", "accumulate", "index_add", "overwrite", "once", "add up")
_slip("C_indices_position_major", "C", "C", """
    dC = torch.zeros_like(C)
    dC.index_add_(0, Xb.t().reshape(-1), demb.reshape(-1, n_embd))
    """, "indices flattened position-major while the rows of demb are batch-major",
    "order", "transpose", "index", "row", "flatten", "match", "align")
_slip("C_all_to_first_character", "C", "C", """
    dC = torch.zeros_like(C)
    dC.index_add_(0, Xb[:, 0], demb.sum(1))
    """, "every position's gradient summed and sent to the first character of the context",
    "position", "every", "context", "each", "character", "first")
