"""2-D CNN lesson (/work/corpus42/cnn2d_pack): slip corpus, HOLDOUT half.

Style of this half: loops over the kernel's 3x3 taps with slicing of padded buffers, max_pool2d's
indices with scatter, repeat_interleave, torch.where and einsum. The tune half uses
conv_transpose2d / conv2d tricks and unfolded windows.

RIGHT = {name: (step_id, tensor, code, "")}
WRONG = {name: (step_id, tensor, code, slip, words)}
"""
S = "cnn2d_pack/"

W_MEAN = ("mean", "average", "divide", "divided", "scale", "factor")
W_FLIP = ("flip", "rotate", "180", "reverse", "taps")
W_END = ("right", "end", "shift", "side", "position", "left", "crop", "offset")
W_POOL_SPREAD = ("spread", "window", "argmax", "max", "every", "average", "all")
W_POOL_FIRST = ("argmax", "max", "first", "last", "corner", "window", "position", "bottom")
W_TIE = ("tie", "equal", "first", "several", "zero", ">=")
W_RELU = ("mask", "relu", "positive", "input", "output", ">")
W_BCAST = ("sum", "axis", "axes", "dim", "shape", "batch", "position")
W_REPEAT = ("repeat", "accumulate", "index_add", "duplicate", "overwrite", "add up", "copy")

RIGHT, WRONG = {}, {}


def right(name, step, tensor, code):
    assert name not in RIGHT
    RIGHT[name] = (S + step, tensor, code, "")


def wrong(name, step, tensor, code, slip, words):
    assert name not in WRONG
    WRONG[name] = (S + step, tensor, code, slip, tuple(words))


def dimg_loop(kidx="K[:, 0, i, j]", crop="[:, :, 1:-1, 1:-1]"):
    return ("dpad = torch.zeros(n, 1, block_size + 2, n_embd + 2)\n"
            "for i in range(3):\n"
            "    for j in range(3):\n"
            f"        dpad[:, 0, i:i + block_size, j:j + n_embd] += torch.einsum('bohw,o->bhw', dhpre, {kidx})\n"
            f"dimg = dpad{crop}\n")


def dK_loop(pad="(1, 1, 1, 1)", kidx="i, j", rows="i:i + block_size", cols="j:j + n_embd", spec="'bohw,bhw->o'"):
    return (f"xp = F.pad(img, {pad})\n"
            "dK = torch.zeros_like(K)\n"
            "for i in range(3):\n"
            "    for j in range(3):\n"
            f"        dK[:, 0, {kidx}] = torch.einsum({spec}, dhpre, xp[:, 0, {rows}, {cols}])\n")


SCATTER_POOL = ("_, idx = F.max_pool2d(h, 2, return_indices=True)\n"
                "dh = torch.zeros_like(h).flatten(2).scatter_(2, idx.flatten(2), dpooled.flatten(2)).view_as(h)\n")
R = {
    "logits": "p = F.softmax(logits, dim=1)\np[torch.arange(n), Yb] -= 1\ndlogits = p / n\n",
    "dflat": "dflat = torch.einsum('bv,iv->bi', dlogits, W)\n",
    "dW": "dW = torch.einsum('bi,bv->iv', flat, dlogits)\n",
    "db": "db = torch.einsum('bv->v', dlogits)\n",
    "pooled": "dpooled = dflat.reshape(pooled.shape)\n",
    "h": SCATTER_POOL,
    "hpre": "dhpre = torch.where(h > 0, dh, torch.zeros_like(dh))\n",
    "dimg": dimg_loop(),
    "dK": dK_loop(),
    "dkb": "dkb = torch.einsum('bohw->o', dhpre)\n",
    "emb": "demb = dimg[:, 0]\n",
    "C": "dC = F.one_hot(Xb.flatten(), vocab_size).float().T @ demb.flatten(0, 1)\n",
}
STEP_PARTS = {"logits": ["logits"], "flat": ["dflat", "dW", "db"], "pooled": ["pooled"], "h": ["h"], "hpre": ["hpre"],
              "img": ["dimg", "dK", "dkb"], "emb": ["emb"], "C": ["C"]}


def code(step, **over):
    return "".join(over.get(p, R[p]) for p in STEP_PARTS[step])


for st in STEP_PARTS:
    right(f"{st}_loops", st, st, code(st))
right("h_scatter_add", "h", "h",
      "_, idx = F.max_pool2d(h, kernel_size=2, return_indices=True)\n"
      "flat_dh = torch.zeros(n, n_maps, block_size * n_embd)\n"
      "flat_dh.scatter_add_(2, idx.view(n, n_maps, -1), dpooled.reshape(n, n_maps, -1))\n"
      "dh = flat_dh.view(h.shape)\n")
right("hpre_input_where", "hpre", "hpre", "dhpre = torch.where(hpre > 0, dh, 0.0)\n")
right("img_flip_conv_einsum", "img", "img",
      "dimg = F.conv2d(dhpre, K.flip(-1).flip(-2).permute(1, 0, 2, 3), padding=1)\n" + dK_loop() +
      "dkb = dhpre.sum(3).sum(2).sum(0)\n")
right("img_loops_unfold_K", "img", "K",
      dimg_loop() + "cols = F.unfold(img, 3, padding=1)\n"
      "dK = torch.einsum('bol,bkl->ok', dhpre.reshape(n, n_maps, -1), cols).reshape(n_maps, 1, 3, 3)\n"
      + R["dkb"])
right("img_padded_conv", "img", "img",
      "dimg = F.conv2d(F.pad(dhpre, (1, 1, 1, 1)), K.flip(2, 3).transpose(0, 1))\n" + dK_loop() + R["dkb"])
right("emb_sum", "emb", "emb", "demb = dimg.sum(1)\n")

# ---- WRONG -------------------------------------------------------------------------
wrong("logits_sign", "logits", "logits", "p = F.softmax(logits, dim=1)\np[torch.arange(n), Yb] -= 1\ndlogits = -p / n\n",
      "sign flipped", ("sign", "negative", "minus", "flip", "opposite"))
wrong("logits_softmax_dim0", "logits", "logits",
      "p = F.softmax(logits, dim=0)\np[torch.arange(n), Yb] -= 1\ndlogits = p / n\n",
      "softmax over the batch axis", ("dim", "axis", "row", "column", "softmax"))

wrong("flat_dW_mean", "flat", "W", code("flat", dW="dW = torch.einsum('bi,bv->iv', flat, dlogits) / n\n"),
      "mean instead of sum (dlogits already has the 1/n)", W_MEAN + ("twice", "/ n"))
wrong("flat_db_axis", "flat", "b", code("flat", db="db = torch.einsum('bv->b', dlogits)\n"),
      "bias summed over the wrong axis (shape)", W_BCAST + ("broadcast", "row"))

wrong("pooled_wrong_split", "pooled", "pooled", "dpooled = dflat.view(n, 4, n_maps, 4).transpose(1, 2)\n",
      "flat vector split in the wrong axis order", ("order", "channel", "layout", "view", "reshape", "scramble", "permute"))
wrong("pooled_batch_mixed", "pooled", "pooled", "dpooled = dflat.T.reshape(n, n_maps, 4, 4)\n",
      "transposed before reshaping: batch and features mixed", ("order", "transpose", "batch", "scramble", "reshape"))

wrong("h_avg", "h", "h", "dh = dpooled.repeat_interleave(2, 2).repeat_interleave(2, 3) * 0.25\n",
      "gradient spread over the window (average-pooling's gradient)", W_POOL_SPREAD)
wrong("h_bottomright", "h", "h", "dh = torch.zeros_like(h)\ndh[:, :, 1::2, 1::2] = dpooled\n",
      "gradient sent to a fixed element (bottom-right) of each window, not the argmax", W_POOL_FIRST)
wrong("h_equal_ties", "h", "h",
      "up = pooled.repeat_interleave(2, 2).repeat_interleave(2, 3)\n"
      "dh = torch.where(h == up, dpooled.repeat_interleave(2, 2).repeat_interleave(2, 3), torch.zeros_like(h))\n",
      "equality with the window's max: tied entries all get the gradient", W_TIE)
wrong("h_loop_ge", "h", "h",
      "dh = torch.zeros_like(h)\n"
      "best = h[:, :, 0::2, 0::2].clone()\n"
      "arg = torch.zeros_like(best, dtype=torch.long)\n"
      "for a in range(2):\n"
      "    for c in range(2):\n"
      "        cand = h[:, :, a::2, c::2]\n"
      "        take = cand >= best\n"
      "        best = torch.where(take, cand, best)\n"
      "        arg = torch.where(take, torch.full_like(arg, 2 * a + c), arg)\n"
      "for a in range(2):\n"
      "    for c in range(2):\n"
      "        dh[:, :, a::2, c::2] = dpooled * (arg == 2 * a + c)\n",
      "running max with >= sends the gradient to the last of tied entries, not the first",
      ("tie", ">=", "first", "last", "equal"))
wrong("h_global_max", "h", "h",
      "m = h.flatten(2).argmax(-1, keepdim=True)\n"
      "dh = torch.zeros_like(h).flatten(2).scatter_(2, m, dpooled.flatten(2).sum(-1, keepdim=True)).view_as(h)\n",
      "all the gradient sent to the map's single largest entry instead of each window's max",
      ("window", "each", "global", "max", "argmax"))

wrong("hpre_output_ge", "hpre", "hpre", "dhpre = torch.where(h >= 0, dh, torch.zeros_like(dh))\n",
      "mask h >= 0: true everywhere, nothing is stopped", (">=", "mask", "output", "zero", "relu"))
wrong("hpre_inverted", "hpre", "hpre", "dhpre = torch.where(hpre < 0, dh, torch.zeros_like(dh))\n",
      "mask inverted: gradient passed where the input was negative", W_RELU + ("invert", "negative"))
wrong("hpre_leaky", "hpre", "hpre", "dhpre = torch.where(hpre > 0, dh, 0.01 * dh)\n",
      "leaky-ReLU slope (0.01) on the negative side", ("leaky", "slope", "0.01", "negative", "zero"))
wrong("hpre_tanh", "hpre", "hpre", "dhpre = dh * (1 - h**2)\n", "tanh's slope instead of ReLU's", ("tanh", "relu", "slope"))

wrong("img_loop_flipped", "img", "img", code("img", dimg=dimg_loop(kidx="K[:, 0, 2 - i, 2 - j]")),
      "taps flipped in the scatter form, which needs no flip", W_FLIP)
wrong("img_conv_noflip", "img", "img", code("img", dimg="dimg = F.conv2d(dhpre, K.permute(1, 0, 2, 3), padding=1)\n"),
      "kernel not rotated by 180 degrees", W_FLIP)
wrong("img_flip_cols_only", "img", "img", code("img", dimg="dimg = F.conv2d(dhpre, K.flip(3).permute(1, 0, 2, 3), padding=1)\n"),
      "kernel flipped along columns only", W_FLIP + ("both", "axis", "axes", "row"))
wrong("img_loop_crop_topleft", "img", "img", code("img", dimg=dimg_loop(crop="[:, :, :block_size, :n_embd]")),
      "padded buffer cropped at the top-left instead of one on each side", W_END)
wrong("img_pad_one_side", "img", "img",
      code("img", dimg="dimg = F.conv2d(F.pad(dhpre, (2, 0, 2, 0)), K.flip(2, 3).permute(1, 0, 2, 3))\n"),
      "gradient padded by 2 on top/left only instead of 1 on each side", W_END)

wrong("K_loop_flipped", "img", "K", code("img", dK=dK_loop(kidx="2 - i, 2 - j")), "weight gradient's taps flipped", W_FLIP)
wrong("K_unfold_hw_swapped", "img", "K",
      code("img", dK="cols = F.unfold(img, 3, padding=1)\n"
                      "dK = torch.einsum('bol,bkl->ok', dhpre.flatten(2), cols).view(n_maps, 1, 3, 3).transpose(2, 3)\n"),
      "kernel's rows and columns swapped", ("transpose", "row", "column", "swap", "order"))
wrong("K_loop_shift", "img", "K", code("img", dK=dK_loop(pad="(1, 1, 1, 2)", rows="i + 1:i + 1 + block_size")),
      "windows shifted down by one row", W_END + ("row",))
wrong("K_nobatch", "img", "K",
      code("img", dK="xp = F.pad(img, (1, 1, 1, 1))\n"
                      "taps = [torch.einsum('bohw,bhw->bo', dhpre, xp[:, 0, i:i + block_size, j:j + n_embd])\n"
                      "        for i in range(3) for j in range(3)]\n"
                      "dK = torch.stack(taps, -1).view(n, n_maps, 1, 3, 3)\n"),
      "batch not summed: one kernel gradient per example (shape)", ("batch", "sum", "shape"))
wrong("K_mean_positions", "img", "K",
      code("img", dK=dK_loop().replace("block_size, j:j + n_embd])", "block_size, j:j + n_embd]) / (block_size * n_embd)")),
      "mean over positions instead of sum", W_MEAN)

wrong("kb_batch_kept", "img", "kb", code("img", dkb="dkb = torch.einsum('bohw->bo', dhpre)\n"),
      "batch axis not summed (shape)", W_BCAST)
wrong("kb_mean", "img", "kb", code("img", dkb="dkb = torch.einsum('bohw->o', dhpre) / (n * block_size * n_embd)\n"),
      "mean instead of sum", W_MEAN)

wrong("emb_no_squeeze", "emb", "emb", "demb = dimg\n", "channel axis not removed (shape)",
      ("squeeze", "shape", "unsqueeze", "axis", "dim"))

wrong("C_index_copy", "C", "C", "dC = torch.zeros_like(C).index_copy_(0, Xb.flatten(), demb.flatten(0, 1))\n",
      "index_copy_ instead of index_add_", W_REPEAT)
wrong("C_mean_per_char", "C", "C",
      "oh = F.one_hot(Xb.flatten(), vocab_size).float()\n"
      "dC = (oh.T @ demb.flatten(0, 1)) / oh.sum(0).clamp(min=1).unsqueeze(1)\n",
      "averaged over each character's occurrences", ("mean", "average", "divide", "count", "sum"))
