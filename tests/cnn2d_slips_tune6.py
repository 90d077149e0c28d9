"""2-D CNN lesson (cnn2d_pack, made by `pack new` from tests/packs/forward/slips_cnn2d.py): a
sixth slip corpus, TUNE half (its other half is tests/cnn2d_slips_holdout6.py).

What it is: rows of backward-pass code as a learner would type them into one step of the lesson.
Every RIGHT row passes the tutor's check; every WRONG row carries one slip that learners really
make with these operations and fails it. The slip families here lean away from the ones tune4 /
tune5 use most: the softmax's gradient taken with log_softmax, the cross-entropy divided by every
entry of logits, the last context character one-hot coded in place of the target, a bias
gradient (b, kb) not summed over the batch, einsum index letters that do not pair up so an index
is summed on each operand separately instead of contracted (dW, dK, dC), the flatten undone as if
the maps came last, max-pool gradients routed to the first entry of each window instead of the
argmax, copied to all four entries by a nearest upsample, scattered with max_pool2d's per-map
indices as if they indexed the whole example, or unpooled but divided by the window size; the
ReLU's slope taken as sign(hpre), as relu(dh), from the convolution recomputed without its bias
or from the pooled output tiled back with repeat; the transposed convolution run without its
padding and cut at the end, the weight gradient's image padded on one side only (wrong padding
on both of the conv's gradients), the kernel flipped for F.conv_transpose2d, the correlation for
dK with input and weight swapped (dK rotated by 180 degrees), the embedding image's subscripts
transposed and the embedding's index_put_ without accumulate. The same slip family is put on
every step where its operation occurs.

Style: torch.einsum for every product and contraction (the linear layer, the ReLU's mask, the
bias sums, the unfolded convolution, the embedding's one-hot), torch.nn.functional calls inside
the backward where a learner would use them (F.softmax / F.log_softmax, F.one_hot,
F.max_pool2d with return_indices and F.max_unpool2d, F.interpolate, F.conv_transpose2d for the
input gradient, F.conv2d on batch-transposed tensors for the weight gradient, F.unfold / F.fold)
and small helper functions defined with `def` inside the row (ce_back, linear_back, unpool,
relu_back, conv_back, embed_back). It was written apart from the diagnosis code, without reading
it, and each row was checked with `backprop-tutor check --json` looking at "passed" only:
`words` are the writer's own guess at what a specific diagnosis of the slip would say (any one of
them is enough), not copied from the tutor's messages.

RIGHT = {name: (step_id, tensor, code, "")}
WRONG = {name: (step_id, tensor, code, slip, words)}
"""
S = "cnn2d_pack/"

W_LOGSOFTMAX = ("log_softmax", "log", "probabilities", "softmax", "exp", "log-probabilities")
W_MEAN = ("mean", "average", "divide", "batch", "numel", "factor")
W_TARGET = ("target", "yb", "xb", "context", "one_hot", "label")
W_BATCH = ("sum", "batch", "bias", "shape", "axis", "dim")
W_LETTERS = ("einsum", "index", "contract", "separately", "sum")
W_PERM = ("permute", "reshape", "order", "layout", "flatten", "channel")
W_POOL = ("max", "argmax", "window", "pool", "route", "indices")
W_RELU = ("relu", "slope", "mask", "derivative", "hpre", "positive")
W_PAD = ("pad", "padding", "crop", "border", "offset", "shift")
W_FLIP = ("flip", "rotate", "180", "kernel", "conv_transpose2d", "correlation")
W_REPEAT = ("repeat", "accumulate", "overwrite", "duplicate", "index_put")

RIGHT, WRONG = {}, {}


def right(name, step, tensor, code):
    assert name not in RIGHT
    RIGHT[name] = (S + step, tensor, code, "")


def wrong(name, step, tensor, code, slip, words):
    assert name not in WRONG
    assert 4 <= len(words) <= 7 and all(w == w.lower() for w in words), name
    WRONG[name] = (S + step, tensor, code, slip, tuple(words))


def sub(base, old, new):
    assert old in base, (old, base)
    return base.replace(old, new)


# ---- pieces a learner reuses inside one step ---------------------------------------
# cross-entropy: a helper with F.softmax and F.one_hot
LOGITS = ("def ce_back(z, y):\n"
          "    p = F.softmax(z, dim=1)\n"
          "    return (p - F.one_hot(y, vocab_size).to(p.dtype)) / z.shape[0]\n"
          "dlogits = ce_back(logits, Yb)\n")
# logits = flat @ W + b: one helper returning the three gradients
FLAT = ("def linear_back(g, a, w):\n"
        "    da = torch.einsum('nv,fv->nf', g, w)\n"
        "    dw = torch.einsum('nf,nv->fv', a, g)\n"
        "    return da, dw, torch.einsum('nv->v', g)\n"
        "dflat, dW, db = linear_back(dlogits, flat, W)\n")
# pooled = max_pool2d(h, 2): max_pool2d's indices fed to F.max_unpool2d
H_UNPOOL = ("def unpool(g, like):\n"
            "    _, idx = F.max_pool2d(like, 2, return_indices=True)\n"
            "    return F.max_unpool2d(g, idx, 2, output_size=like.shape[-2:])\n"
            "dh = unpool(dpooled, h)\n")
# max-pool: the same indices used by scatter_add_ on each flattened map
H_SCATTER = ("_, idx = F.max_pool2d(h, 2, return_indices=True)\n"
             "flat_dh = torch.zeros(n, n_maps, block_size * n_embd)\n"
             "flat_dh.scatter_add_(2, idx.flatten(2), dpooled.flatten(2))\n"
             "dh = flat_dh.view_as(h)\n")
# h = relu(hpre): the 0/1 slope multiplied in by einsum
HPRE = ("def relu_back(g, z):\n"
        "    return torch.einsum('nmyx,nmyx->nmyx', g, (z > 0).to(g.dtype))\n"
        "dhpre = relu_back(dh, hpre)\n")
# the ReLU's mask read from the pooled output, blown back up with a nearest upsample: the
# gradient only lives at each window's max, where h equals pooled, so this is right
HPRE_POOLED = ("on = F.interpolate((pooled > 0).to(dh.dtype), scale_factor=2, mode='nearest')\n"
               "dhpre = torch.einsum('nmyx,nmyx->nmyx', dh, on)\n")
# conv: F.conv_transpose2d for the input, F.conv2d on batch-transposed tensors for the kernel
IMG = ("def conv_back(g, inp, w):\n"
       "    dinp = F.conv_transpose2d(g, w, padding=1)\n"
       "    dw = F.conv2d(inp.transpose(0, 1), g.transpose(0, 1), padding=1).transpose(0, 1)\n"
       "    return dinp, dw, torch.einsum('nmyx->m', g)\n"
       "dimg, dK, dkb = conv_back(dhpre, img, K)\n")
# conv: F.unfold columns contracted with einsum, F.fold back
IMG_UNFOLD = ("cols = F.unfold(img, kernel_size, padding=1)\n"
              "g = dhpre.flatten(2)\n"
              "dK = torch.einsum('nmp,nkp->mk', g, cols).view_as(K)\n"
              "dcols = torch.einsum('mk,nmp->nkp', K.flatten(1), g)\n"
              "dimg = F.fold(dcols, (block_size, n_embd), kernel_size, padding=1)\n"
              "dkb = torch.einsum('nmp->m', g)\n")
EMB = "demb = torch.einsum('ncyx->nyx', dimg)\n"
# emb = C[Xb]: a helper contracting F.one_hot with the gradient
C_HELPER = ("def embed_back(ix, g):\n"
            "    onehot = F.one_hot(ix, vocab_size).to(g.dtype)\n"
            "    return torch.einsum('ntv,nte->ve', onehot, g)\n"
            "dC = embed_back(Xb, demb)\n")

# ---- RIGHT ---------------------------------------------------------------------------
right("logits_helper_softmax_one_hot", "logits", "logits", LOGITS)
right("flat_helper_linear_back", "flat", "W", FLAT)
right("pooled_view_as", "pooled", "pooled", "dpooled = dflat.view_as(pooled)\n")
right("h_helper_max_unpool", "h", "h", H_UNPOOL)
right("h_scatter_add_indices_per_map", "h", "h", H_SCATTER)
right("hpre_helper_einsum_mask", "hpre", "hpre", HPRE)
right("hpre_mask_from_pooled_upsampled", "hpre", "hpre", HPRE_POOLED)
right("img_helper_conv_transpose", "img", "img", IMG)
right("img_unfold_einsum_fold", "img", "K", IMG_UNFOLD)
right("emb_einsum", "emb", "emb", EMB)
right("C_helper_one_hot_einsum", "C", "C", C_HELPER)

# ---- WRONG: cross-entropy ------------------------------------------------------------
wrong("logits_log_softmax_not_exp", "logits", "logits", sub(LOGITS, "F.softmax(z, dim=1)", "F.log_softmax(z, dim=1)"),
      "log_softmax used where the probabilities belong: log-probabilities minus the one-hot",
      W_LOGSOFTMAX)
wrong("logits_divide_by_numel", "logits", "logits", sub(LOGITS, "/ z.shape[0]", "/ z.numel()"),
      "divided by every entry of logits (n * vocab_size) instead of the batch size", W_MEAN)
wrong("logits_last_context_char_as_target", "logits", "logits", sub(LOGITS, "ce_back(logits, Yb)", "ce_back(logits, Xb[:, -1])"),
      "the one-hot built from the last character of the context Xb instead of the target Yb", W_TARGET)

# ---- WRONG: logits = flat @ W + b ----------------------------------------------------
wrong("flat_db_batch_kept", "flat", "b", sub(FLAT, "torch.einsum('nv->v', g)", "g"),
      "db passed through as dlogits: the bias is broadcast over the batch, its gradient must be summed over it",
      W_BATCH)
wrong("flat_dW_batch_letters_unpaired", "flat", "W",
      sub(FLAT, "torch.einsum('nf,nv->fv', a, g)", "torch.einsum('nf,mv->fv', a, g)"),
      "dW's einsum gives the batch two letters: flat and dlogits summed over it separately, an outer product of sums",
      W_LETTERS + ("batch",))

# ---- WRONG: flat = pooled.flatten(1) -------------------------------------------------
wrong("pooled_einsum_channels_last", "pooled", "pooled",
      "dpooled = torch.einsum('nyxc->ncyx', dflat.view(n, 4, 4, n_maps))\n",
      "undone as if the maps came last: flatten(1) keeps each map's 16 entries together", W_PERM)

# ---- WRONG: pooled = max_pool2d(h, 2) ------------------------------------------------
wrong("h_first_entry_of_window", "h", "h",
      "dh = torch.zeros_like(h)\n"
      "dh[:, :, ::2, ::2] = dpooled\n",
      "every window's gradient put at its first (top-left) entry instead of at its max", W_POOL + ("first",))
wrong("h_nearest_upsample_all_four", "h", "h", "dh = F.interpolate(dpooled, scale_factor=2, mode='nearest')\n",
      "the gradient copied to all four entries of each window, not only to the max",
      ("max", "argmax", "window", "upsample", "copy", "all"))
wrong("h_indices_over_whole_example", "h", "h",
      "_, idx = F.max_pool2d(h, 2, return_indices=True)\n"
      "flat_dh = torch.zeros(n, n_maps * block_size * n_embd)\n"
      "flat_dh.scatter_add_(1, idx.flatten(1), dpooled.flatten(1))\n"
      "dh = flat_dh.view_as(h)\n",
      "max_pool2d's indices count within each map, but they are scattered into the whole example: every map's gradient lands in the first map",
      ("indices", "map", "channel", "offset", "scatter", "flatten"))
wrong("h_unpool_divided_by_window", "h", "h", sub(H_UNPOOL, "dh = unpool(dpooled, h)", "dh = unpool(dpooled, h) / 4"),
      "routed to the max but divided by the window's four entries, as an average pool would be",
      W_POOL + ("average",))

# ---- WRONG: h = relu(hpre) -----------------------------------------------------------
wrong("hpre_sign_as_slope", "hpre", "hpre", sub(HPRE, "(z > 0).to(g.dtype)", "torch.sign(z)"),
      "the ReLU's slope taken as sign(hpre): -1 where it is off instead of 0", W_RELU + ("sign",))
wrong("hpre_relu_of_gradient", "hpre", "hpre", "dhpre = F.relu(dh)\n",
      "the forward's relu applied to the gradient: the mask comes from dh instead of hpre", W_RELU)
wrong("hpre_mask_from_conv_without_bias", "hpre", "hpre", sub(HPRE, "relu_back(dh, hpre)", "relu_back(dh, F.conv2d(img, K, padding=1))"),
      "the ReLU's input recomputed without the bias kb: the mask is taken at the wrong values",
      ("bias", "kb", "mask", "relu", "hpre", "recomputed"))
wrong("hpre_mask_from_pooled_tiled", "hpre", "hpre", sub(HPRE_POOLED, "F.interpolate((pooled > 0).to(dh.dtype), scale_factor=2, mode='nearest')",
                                                            "(pooled > 0).to(dh.dtype).repeat(1, 1, 2, 2)"),
      "the mask taken after pooling and tiled back with repeat: the 4x4 map is repeated, not each window",
      ("mask", "pooled", "repeat", "tile", "window", "relu"))

# ---- WRONG: hpre = conv2d(img, K, kb, padding=1) -------------------------------------
wrong("img_transposed_conv_unpadded_cut_at_end", "img", "img",
      sub(IMG, "F.conv_transpose2d(g, w, padding=1)", "F.conv_transpose2d(g, w)[:, :, :-2, :-2]"),
      "the transposed convolution run without padding=1 and its two extra rows and columns cut at the end: shifted by one",
      W_PAD)
wrong("img_dK_image_padded_one_side", "img", "K",
      sub(IMG, "F.conv2d(inp.transpose(0, 1), g.transpose(0, 1), padding=1)", "F.conv2d(F.pad(inp, (0, 2, 0, 2)).transpose(0, 1), g.transpose(0, 1))"),
      "the image padded by 2 on the right and bottom only for dK instead of 1 on every side", W_PAD)
wrong("img_dkb_batch_kept", "img", "kb", sub(IMG, "torch.einsum('nmyx->m', g)", "torch.einsum('nmyx->nm', g)"),
      "dkb summed over the positions but not over the batch", W_BATCH)
wrong("img_dK_input_weight_swapped", "img", "K",
      sub(IMG, "F.conv2d(inp.transpose(0, 1), g.transpose(0, 1), padding=1).transpose(0, 1)",
          "F.conv2d(g.transpose(0, 1), inp.transpose(0, 1), padding=1)"),
      "dK's correlation run with dhpre as the input and the image as the weight: dK comes out rotated by 180 degrees",
      W_FLIP)
wrong("img_transposed_conv_kernel_flipped", "img", "img", sub(IMG, "F.conv_transpose2d(g, w, padding=1)", "F.conv_transpose2d(g, w.flip(2, 3), padding=1)"),
      "the kernel flipped for F.conv_transpose2d, which already does the flip", W_FLIP)
wrong("img_unfold_dK_position_letters_unpaired", "img", "K",
      sub(IMG_UNFOLD, "torch.einsum('nmp,nkp->mk', g, cols)", "torch.einsum('nmp,nkq->mk', g, cols)"),
      "dK's einsum gives the positions two letters: dhpre and the columns summed over them separately",
      W_LETTERS + ("position",))

# ---- WRONG: img = emb.unsqueeze(1) ---------------------------------------------------
wrong("emb_einsum_transposed", "emb", "emb", sub(EMB, "->nyx'", "->nxy'"),
      "the einsum's output subscripts swap rows and columns: rows are positions, columns embedding dims",
      ("transpose", "swap", "subscript", "order", "axis", "einsum"))

# ---- WRONG: emb = C[Xb] --------------------------------------------------------------
wrong("C_position_letters_unpaired", "C", "C",
      sub(C_HELPER, "torch.einsum('ntv,nte->ve', onehot, g)", "torch.einsum('ntv,nse->ve', onehot, g)"),
      "the einsum gives the positions two letters: every character gets the whole row's gradient sum",
      W_LETTERS + ("position",))
wrong("C_index_put_no_accumulate", "C", "C",
      "dC = torch.zeros_like(C).index_put_((Xb.flatten(),), demb.flatten(0, 1))\n",
      "index_put_ without accumulate=True: a repeated character keeps one row instead of the sum", W_REPEAT)
