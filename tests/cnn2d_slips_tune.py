"""2-D CNN lesson (/work/corpus42/cnn2d_pack): slip corpus, TUNE half.

Style of this half: F.conv_transpose2d / F.conv2d tricks for the convolution, windows unfolded and
argmax'ed for the max-pool, masks by multiplication. The holdout half uses loops over the kernel's
taps with slicing, max_pool2d's indices with scatter, repeat_interleave and torch.where.

RIGHT = {name: (step_id, tensor, code, "")}
WRONG = {name: (step_id, tensor, code, slip, words)}
"""
S = "cnn2d_pack/"

W_MEAN = ("mean", "average", "divide", "divided", "scale", "factor")
W_FLIP = ("flip", "rotate", "180", "reverse", "taps")
W_END = ("right", "end", "shift", "side", "position", "left", "crop", "offset")
W_POOL_SPREAD = ("spread", "window", "argmax", "max", "every", "average", "all")
W_POOL_FIRST = ("argmax", "max", "first", "corner", "window", "position", "top")
W_TIE = ("tie", "equal", "first", "several", "zero", ">=")
W_RELU = ("mask", "relu", "positive", "input", "output", ">")
W_BCAST = ("sum", "axis", "axes", "dim", "shape", "batch", "position")
W_REPEAT = ("repeat", "accumulate", "index_add", "duplicate", "overwrite", "add up", "+=")

RIGHT, WRONG = {}, {}


def right(name, step, tensor, code):
    assert name not in RIGHT
    RIGHT[name] = (S + step, tensor, code, "")


def wrong(name, step, tensor, code, slip, words):
    assert name not in WRONG
    WRONG[name] = (S + step, tensor, code, slip, tuple(words))


ARGMAX_POOL = (
    "win = h.unfold(2, 2, 2).unfold(3, 2, 2).reshape(n, n_maps, 4, 4, 4)\n"
    "pick = F.one_hot(win.argmax(-1), 4) * dpooled.unsqueeze(-1)\n"
    "dh = pick.view(n, n_maps, 4, 4, 2, 2).permute(0, 1, 2, 4, 3, 5).reshape(h.shape)\n")
R = {
    "logits": "dlogits = (F.softmax(logits, 1) - F.one_hot(Yb, vocab_size)) / n\n",
    "dflat": "dflat = dlogits @ W.T\n",
    "dW": "dW = flat.T @ dlogits\n",
    "db": "db = dlogits.sum(0)\n",
    "pooled": "dpooled = dflat.view(n, n_maps, 4, 4)\n",
    "h": ARGMAX_POOL,
    "hpre": "dhpre = dh * (hpre > 0)\n",
    "dimg": "dimg = F.conv_transpose2d(dhpre, K, padding=1)\n",
    "dK": "dK = F.conv2d(img.transpose(0, 1), dhpre.transpose(0, 1), padding=1).transpose(0, 1)\n",
    "dkb": "dkb = dhpre.sum((0, 2, 3))\n",
    "emb": "demb = dimg.squeeze(1)\n",
    "C": "dC = torch.zeros_like(C)\ndC.index_add_(0, Xb.reshape(-1), demb.reshape(-1, n_embd))\n",
}
STEP_PARTS = {"logits": ["logits"], "flat": ["dflat", "dW", "db"], "pooled": ["pooled"], "h": ["h"], "hpre": ["hpre"],
              "img": ["dimg", "dK", "dkb"], "emb": ["emb"], "C": ["C"]}


def code(step, **over):
    return "".join(over.get(p, R[p]) for p in STEP_PARTS[step])


for st in STEP_PARTS:
    right(f"{st}_plain", st, st, code(st))
right("pooled_reshape", "pooled", "pooled", "dpooled = dflat.reshape(pooled.shape)\n")
right("h_eq_first", "h", "h",
      "win = h.unfold(2, 2, 2).unfold(3, 2, 2).flatten(-2)\n"
      "first = F.one_hot(win.max(-1).indices, 4).float()\n"
      "g = (first * dpooled[..., None]).unflatten(-1, (2, 2))\n"
      "dh = g.transpose(3, 4).reshape(n, n_maps, block_size, n_embd)\n")
right("hpre_output_mask", "hpre", "hpre", "dhpre = dh * (h > 0).float()\n")
right("img_conv2d_flip", "img", "img",
      "dimg = F.conv2d(dhpre, K.flip(2, 3).transpose(0, 1), padding=1)\n" + R["dK"] + "dkb = dhpre.sum(dim=(0, 2, 3))\n")
right("img_ct_crop_unfold", "img", "K",
      "dimg = F.conv_transpose2d(dhpre, K)[:, :, 1:-1, 1:-1]\n"
      "cols = F.unfold(img, kernel_size, padding=1)\n"
      "dK = torch.einsum('bol,bkl->ok', dhpre.flatten(2), cols).view(K.shape)\n"
      "dkb = dhpre.sum(0).sum(-1).sum(-1)\n")
right("img_unfold_mm", "img", "K",
      R["dimg"] + "cols = F.unfold(img, 3, padding=1).transpose(1, 2).reshape(-1, 9)\n"
      "dK = (dhpre.permute(1, 0, 2, 3).reshape(n_maps, -1) @ cols).view(n_maps, 1, 3, 3)\n" + R["dkb"])

# ---- WRONG -------------------------------------------------------------------------
wrong("logits_no_div", "logits", "logits", "dlogits = F.softmax(logits, 1) - F.one_hot(Yb, vocab_size)\n",
      "forgot to divide by n", ("mean", "divide", "/ n", "batch", "average", "scale"))
wrong("logits_no_onehot", "logits", "logits", "dlogits = F.softmax(logits, 1) / n\n",
      "forgot to subtract one at the true character", ("one", "one_hot", "true", "subtract", "label", "target"))

wrong("flat_dW_extra_n", "flat", "W", code("flat", dW="dW = flat.T @ dlogits / n\n"),
      "divided by n again", ("twice", "/ n", "divide", "scale", "mean", "factor"))
wrong("flat_db_mean", "flat", "b", code("flat", db="db = dlogits.mean(0)\n"), "mean instead of sum", W_MEAN)

wrong("pooled_channels_last", "pooled", "pooled", "dpooled = dflat.view(n, 4, 4, n_maps).permute(0, 3, 1, 2)\n",
      "unflattened as if channels came last: entries scrambled",
      ("order", "channel", "layout", "view", "reshape", "scramble", "permute"))
wrong("pooled_hw_swapped", "pooled", "pooled", "dpooled = dflat.view(n, n_maps, 4, 4).transpose(2, 3)\n",
      "rows and columns of each map swapped", ("transpose", "order", "row", "column", "swap", "scramble"))

wrong("h_spread", "h", "h", "dh = F.interpolate(dpooled, scale_factor=2, mode='nearest') / 4\n",
      "gradient spread evenly over each 2x2 window (average-pool's gradient)", W_POOL_SPREAD)
wrong("h_every", "h", "h", "dh = dpooled.repeat_interleave(2, dim=2).repeat_interleave(2, dim=3)\n",
      "gradient copied to every element of the window", W_POOL_SPREAD)
wrong("h_topleft", "h", "h", "dh = torch.zeros_like(h)\ndh[:, :, ::2, ::2] = dpooled\n",
      "gradient sent to the first (top-left) element instead of the argmax", W_POOL_FIRST)
wrong("h_equal_ties", "h", "h",
      "up = F.interpolate(pooled, scale_factor=2, mode='nearest')\n"
      "dh = (h == up).float() * F.interpolate(dpooled, scale_factor=2, mode='nearest')\n",
      "equality mask: tied maxima (all-zero windows after ReLU) each get the full gradient", W_TIE)
wrong("h_running_max_ge", "h", "h",
      "win = h.unfold(2, 2, 2).unfold(3, 2, 2).reshape(n, n_maps, 4, 4, 4)\n"
      "best = win[..., 0]\nidx = torch.zeros_like(best, dtype=torch.long)\n"
      "for j in range(1, 4):\n"
      "    better = win[..., j] >= best\n"
      "    idx = torch.where(better, torch.full_like(idx, j), idx)\n"
      "    best = torch.where(better, win[..., j], best)\n"
      "pick = F.one_hot(idx, 4) * dpooled.unsqueeze(-1)\n"
      "dh = pick.view(n, n_maps, 4, 4, 2, 2).permute(0, 1, 2, 4, 3, 5).reshape(h.shape)\n",
      "running max with >= keeps the last of tied maxima instead of the first", ("tie", ">=", "first", "last", "equal"))
wrong("h_windows_layout", "h", "h",
      "win = h.reshape(n, n_maps, 4, 4, 4)\n"
      "pick = F.one_hot(win.argmax(-1), 4) * dpooled.unsqueeze(-1)\n"
      "dh = pick.reshape(h.shape)\n",
      "windows made by a plain reshape: groups of 4 along a row, not 2x2 squares",
      ("window", "layout", "reshape", "square", "2x2", "row"))

wrong("hpre_output_ge", "hpre", "hpre", "dhpre = dh * (h >= 0)\n",
      "mask from the output with >=: every entry passes (h is never negative)", (">=", "mask", "output", "zero", "relu"))
wrong("hpre_no_mask", "hpre", "hpre", "dhpre = dh.clone()\n", "ReLU's mask missing", W_RELU + ("missing",))
wrong("hpre_times_h", "hpre", "hpre", "dhpre = dh * h\n", "multiplied by the output instead of its 0/1 mask",
      W_RELU + ("value", "0/1", "indicator"))
wrong("hpre_grad_sign", "hpre", "hpre", "dhpre = dh * (dh > 0)\n",
      "mask taken from the gradient's sign instead of the input's", W_RELU + ("gradient", "sign"))

wrong("img_noflip", "img", "img", code("img", dimg="dimg = F.conv2d(dhpre, K.transpose(0, 1), padding=1)\n"),
      "kernel not flipped in the input gradient", W_FLIP)
wrong("img_flip_one_axis", "img", "img", code("img", dimg="dimg = F.conv2d(dhpre, K.flip(2).transpose(0, 1), padding=1)\n"),
      "kernel flipped along rows only, not columns", W_FLIP + ("both", "axis", "axes", "column"))
wrong("img_double_flip", "img", "img", code("img", dimg="dimg = F.conv_transpose2d(dhpre, K.flip(2, 3), padding=1)\n"),
      "kernel flipped before conv_transpose2d, which already flips it", W_FLIP)
wrong("img_crop_wrong_side", "img", "img", code("img", dimg="dimg = F.conv_transpose2d(dhpre, K)[:, :, 2:, 2:]\n"),
      "full transposed convolution cropped from one side instead of one on each side", W_END)
wrong("img_mean_maps", "img", "img", code("img", dimg="dimg = F.conv_transpose2d(dhpre, K, padding=1) / n_maps\n"),
      "averaged over the feature maps instead of summed", W_MEAN)

wrong("K_flipped", "img", "K", code("img", dK=R["dK"].rstrip("\n") + ".flip(2, 3)\n"),
      "weight gradient flipped", W_FLIP)
wrong("K_hw_transposed", "img", "K", code("img", dK=R["dK"].rstrip("\n") + ".transpose(2, 3)\n"),
      "kernel rows and columns swapped", ("transpose", "row", "column", "swap", "order"))
wrong("K_shifted", "img", "K",
      code("img", dK="dK = F.conv2d(F.pad(img, (2, 0, 2, 0)).transpose(0, 1), dhpre.transpose(0, 1)).transpose(0, 1)\n"),
      "input padded by 2 on the top/left only: windows shifted by one", W_END)
wrong("K_mean", "img", "K", code("img", dK=R["dK"].rstrip("\n") + " / n\n"), "mean over the batch", W_MEAN)
wrong("K_not_transposed_back", "img", "K",
      code("img", dK="dK = F.conv2d(img.transpose(0, 1), dhpre.transpose(0, 1), padding=1)\n"),
      "batch-as-channels result not transposed back (shape)", ("transpose", "channel", "shape", "axes"))

wrong("kb_two_axes", "img", "kb", code("img", dkb="dkb = dhpre.sum((0, 2))\n"),
      "summed over batch and rows only (shape)", W_BCAST)
wrong("kb_mean", "img", "kb", code("img", dkb="dkb = dhpre.mean((0, 2, 3))\n"), "mean instead of sum", W_MEAN)

wrong("emb_transposed", "emb", "emb", "demb = dimg.squeeze(1).transpose(1, 2)\n",
      "image rows and columns swapped when undoing unsqueeze", ("transpose", "swap", "row", "column", "order"))

wrong("C_assign", "C", "C", "dC = torch.zeros_like(C)\ndC[Xb] = demb\n", "assignment: repeats overwrite", W_REPEAT)
wrong("C_plus_equals", "C", "C", "dC = torch.zeros_like(C)\ndC[Xb] += demb\n", "advanced-index += loses repeats", W_REPEAT)
