"""2-D CNN lesson (cnn2d_pack, made by `pack new` from tests/packs/forward/slips_cnn2d.py): the
twelfth slip corpus, TUNE half (its other half is tests/cnn2d_slips_holdout8.py).

What it is: rows of backward-pass code as a learner would type them into one step of the lesson.
Every RIGHT row passes the tutor's check; every WRONG row carries one slip that learners really
make with these operations and fails it. The slip families stay away from the ones tune5 ...
tune11 use: a gradient typed where the forward operand belongs, the `d` added (a gradient the
learner has just computed on the line above used as a partner of the product: dflat for flat and
dW for W at the linear layer, the unfolded image's gradient dcols for cols in dK and dK for K in
dimg at the convolution); the target written into the probabilities by overwriting (`scatter_`
with -1) where subtracting (`scatter_add_` of -1) belongs; the target used as a row index alone
(`g[Yb] -= 1`), the rows' own index dropped; the cross-entropy's softmax replaced by an
elementwise sigmoid; the softmax Jacobian's leading factor p dropped, `dp - (p * dp).sum` where
`p * (dp - (p * dp).sum)` belongs; the derivative of -log p written as -p instead of -1/p; a bias
gradient summed over every axis, its own too, down to a scalar (db, dkb); the max-pool's ties
broken toward the last entry of the window instead of the first, the one max_pool2d routes to (a
running max with `>=`, the last column of an argsort); the convolution's gradients padded by
k - 1 = 2, the full convolution's padding, where the forward's padding of k // 2 = 1 belongs (dimg's
padded gradient, dK's correlation); `.T` used on a 4-D tensor to swap its two channel axes, which
reverses all four (the kernel for dimg, the correlation's result for dK); and the ReLU's backward
done in place on `dhpre = dh`, an alias and not a copy, so zeroing it overwrites dh, which is
still needed. The same slip family is put on every step where its operation occurs and the shapes
let it through.

Style: a mix within the file, as different learners would write it: scatter_ / scatter_add_ and
fancy indexing for the target, a small `def` helper through -log p and the softmax, F.linear and
torch.einsum for the linear layer, unflatten for the flatten, the max-pool as a running max over
the four strided offsets of each window (`h[:, :, a::2, c::2]`) or as F.unfold / F.fold windows
routed by argmax and F.one_hot, torch.where for the ReLU, F.pad with a flipped kernel and F.conv2d
on batch-transposed tensors or F.unfold / F.fold with torch.einsum for the convolution, squeeze
for the unsqueeze and index_put_ with accumulate=True or a one-hot matrix product for the
embedding. It was written apart from the diagnosis code, without reading it, and each row was
checked with `backprop-tutor check --json` looking at "passed" only: `words` are the writer's own
guess at what a specific diagnosis of the slip would say (any one of them is enough), not copied
from the tutor's messages.

RIGHT = {name: (step_id, tensor, code, "")}
WRONG = {name: (step_id, tensor, code, slip, words)}
"""
S = "cnn2d_pack/"

W_D_ADDED = ("gradient", "instead", "operand", "forward", "input", "weight")
W_OVERWRITE = ("scatter", "overwrite", "subtract", "target", "minus one", "add")
W_ROW_INDEX = ("index", "row", "target", "arange", "rows", "column")
W_SIGMOID = ("sigmoid", "softmax", "normalise", "probabilities", "row", "sum")
W_P_FACTOR = ("factor", "multiply", "probabilities", "softmax", "jacobian", "missing")
W_LOG = ("log", "derivative", "1/p", "reciprocal", "divide", "probability")
W_SCALAR = ("bias", "sum", "axis", "scalar", "every", "channel")
W_TIE_LAST = ("tie", "first", "last", "winner", "argmax", "window")
W_PAD = ("padding", "pad", "k - 1", "shape", "full", "border")
W_4D_T = ("transpose", ".t", "axes", "reverses", "channels", "permute")
W_IN_PLACE = ("in-place", "clone", "alias", "copy", "overwrites", "dh")

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
# cross-entropy: the one-hot target put in with scatter_add_ of -1
LOGITS_SCATTER = ("p = F.softmax(logits, dim=1)\n"
                  "p.scatter_add_(1, Yb[:, None], -torch.ones(n, 1))\n"
                  "dlogits = p / n\n")
# cross-entropy: fancy indexing
LOGITS_INDEX = ("g = torch.softmax(logits, -1)\n"
                "g[torch.arange(n), Yb] -= 1\n"
                "dlogits = g / n\n")
# cross-entropy: a helper that goes through -log p and the softmax
LOGITS_CHAIN = ("def ce_backward(z, y):\n"
                "    p = z.softmax(-1)\n"
                "    dp = -F.one_hot(y, vocab_size) / (p * y.numel())\n"
                "    return p * (dp - (dp * p).sum(-1, keepdim=True))\n"
                "dlogits = ce_backward(logits, Yb)\n")
# logits = flat @ W + b
FLAT = ("dflat = F.linear(dlogits, W)\n"
        "dW = torch.einsum('nf,nv->fv', flat, dlogits)\n"
        "db = dlogits.sum(0)\n")
FLAT_W_FIRST = ("dW = flat.T @ dlogits\n"
                "db = dlogits.sum(dim=0)\n"
                "dflat = dlogits @ W.T\n")
# flat = pooled.flatten(1)
POOLED = "dpooled = dflat.unflatten(1, (n_maps, block_size // 2, n_embd // 2))\n"
# pooled = max_pool2d(h, 2): a running max over the four offsets, the first max kept on ties
H_RUNNING = ("best = h[:, :, 0::2, 0::2]\n"
             "which = torch.zeros_like(best, dtype=torch.long)\n"
             "for k, (a, c) in enumerate([(0, 1), (1, 0), (1, 1)], start=1):\n"
             "    cand = h[:, :, a::2, c::2]\n"
             "    take = cand > best\n"
             "    best = torch.where(take, cand, best)\n"
             "    which = torch.where(take, k, which)\n"
             "dh = torch.zeros_like(h)\n"
             "for k, (a, c) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)]):\n"
             "    dh[:, :, a::2, c::2] = dpooled * (which == k)\n")
# the pool's windows as F.unfold columns, routed by argmax
H_UNFOLD = ("hh = h.reshape(n * n_maps, 1, block_size, n_embd)\n"
            "win = F.unfold(hh, 2, stride=2)\n"
            "pick = F.one_hot(win.argmax(1), 4).transpose(1, 2).float()\n"
            "dwin = pick * dpooled.reshape(n * n_maps, 1, -1)\n"
            "dh = F.fold(dwin, (block_size, n_embd), 2, stride=2).view_as(h)\n")
# h = relu(hpre)
HPRE = "dhpre = torch.where(hpre > 0, dh, torch.zeros_like(dh))\n"
# hpre = conv2d(img, K, kb, padding=1): F.pad and a flipped kernel
IMG_PAD = ("g = F.pad(dhpre, (1, 1, 1, 1))\n"
           "dimg = F.conv2d(g, K.flip(2, 3).transpose(0, 1))\n"
           "dK = F.conv2d(img.transpose(0, 1), dhpre.transpose(0, 1), padding=1).transpose(0, 1)\n"
           "dkb = dhpre.sum(dim=(0, 2, 3))\n")
# the same with F.unfold / F.fold and einsum
IMG_UNFOLD = ("cols = F.unfold(img, kernel_size, padding=1)\n"
              "g = dhpre.flatten(2)\n"
              "dcols = torch.einsum('ok,nop->nkp', K.reshape(n_maps, -1), g)\n"
              "dimg = F.fold(dcols, (block_size, n_embd), kernel_size, padding=1)\n"
              "dK = torch.einsum('nop,nkp->ok', g, cols).reshape(K.shape)\n"
              "dkb = g.sum((0, 2))\n")
IMG_K_FIRST = ("dK = F.conv2d(img.transpose(0, 1), dhpre.transpose(0, 1), padding=1).transpose(0, 1)\n"
               "dkb = dhpre.sum((0, 2, 3))\n"
               "dimg = F.conv_transpose2d(dhpre, K, padding=1)\n")
# img = emb.unsqueeze(1)
EMB = "demb = dimg.squeeze(1)\n"
# emb = C[Xb]
C_INDEX_PUT = "dC = torch.zeros(vocab_size, n_embd).index_put_((Xb,), demb, accumulate=True)\n"
C_ONE_HOT = ("onehot = F.one_hot(Xb.flatten(), vocab_size).float()\n"
             "dC = onehot.T @ demb.flatten(0, 1)\n")

# ---- RIGHT ---------------------------------------------------------------------------
right("logits_scatter_add_target", "logits", "logits", LOGITS_SCATTER)
right("logits_fancy_index", "logits", "logits", LOGITS_INDEX)
right("logits_chain_helper", "logits", "logits", LOGITS_CHAIN)
right("flat_linear_einsum", "flat", "W", FLAT)
right("flat_weight_first", "flat", "flat", FLAT_W_FIRST)
right("pooled_unflatten", "pooled", "pooled", POOLED)
right("h_running_max_offsets", "h", "h", H_RUNNING)
right("h_unfold_argmax", "h", "h", H_UNFOLD)
right("hpre_where", "hpre", "hpre", HPRE)
right("img_pad_flipped_kernel", "img", "img", IMG_PAD)
right("img_unfold_einsum", "img", "K", IMG_UNFOLD)
right("img_kernel_grad_first", "img", "img", IMG_K_FIRST)
right("emb_squeeze", "emb", "emb", EMB)
right("C_index_put_accumulate", "C", "C", C_INDEX_PUT)
right("C_one_hot_matmul", "C", "C", C_ONE_HOT)

# ---- WRONG: a gradient where the forward operand belongs (the `d` added) ------------
wrong("flat_dW_from_dflat", "flat", "W",
      sub(FLAT, "torch.einsum('nf,nv->fv', flat, dlogits)", "torch.einsum('nf,nv->fv', dflat, dlogits)"),
      "dW contracts dflat, computed on the line above, with dlogits: the layer's input flat belongs "
      "there", W_D_ADDED)
wrong("flat_dflat_from_dW", "flat", "flat", sub(FLAT_W_FIRST, "dflat = dlogits @ W.T", "dflat = dlogits @ dW.T"),
      "dflat = dlogits @ dW^T: the weight's gradient, just computed, used where the weight W belongs",
      W_D_ADDED)
wrong("img_dK_from_dcols", "img", "K",
      sub(IMG_UNFOLD, "torch.einsum('nop,nkp->ok', g, cols)", "torch.einsum('nop,nkp->ok', g, dcols)"),
      "dK built from dcols, the unfolded image's gradient of the line above, instead of the "
      "unfolded image cols", W_D_ADDED)
wrong("img_dimg_from_dK", "img", "img",
      sub(IMG_K_FIRST, "F.conv_transpose2d(dhpre, K, padding=1)", "F.conv_transpose2d(dhpre, dK, padding=1)"),
      "the input gradient convolved with dK, the kernel's gradient computed first, where the kernel "
      "K belongs", W_D_ADDED)

# ---- WRONG: the target written into the probabilities --------------------------------
wrong("logits_scatter_overwrites_target", "logits", "logits",
      sub(LOGITS_SCATTER, "p.scatter_add_(1, Yb[:, None], -torch.ones(n, 1))", "p.scatter_(1, Yb[:, None], -1.0)"),
      "scatter_ overwrites the target's probability with -1 where scatter_add_ subtracts 1 from it "
      "(p - 1)", W_OVERWRITE)
wrong("logits_target_as_row_index", "logits", "logits", sub(LOGITS_INDEX, "g[torch.arange(n), Yb] -= 1", "g[Yb] -= 1"),
      "g[Yb] -= 1 picks whole rows by the targets' values: the row index arange(n) is missing, so "
      "the rows numbered like the targets lose 1 in every column", W_ROW_INDEX)
wrong("logits_sigmoid_for_softmax", "logits", "logits",
      sub(LOGITS_INDEX, "torch.softmax(logits, -1)", "torch.sigmoid(logits)"),
      "the probabilities taken as an elementwise sigmoid, as in binary cross-entropy: the softmax's "
      "normalisation over the row is missing", W_SIGMOID)

# ---- WRONG: the softmax Jacobian's leading factor p dropped -----------------------
wrong("logits_chain_p_factor_dropped", "logits", "logits",
      sub(LOGITS_CHAIN, "return p * (dp - (dp * p).sum(-1, keepdim=True))",
          "return dp - (dp * p).sum(-1, keepdim=True)"),
      "dp - sum(p * dp): the softmax's backward without the multiplication by p in front", W_P_FACTOR)

# ---- WRONG: the derivative of -log p written as -p ---------------------------------
wrong("logits_log_derivative_times_p", "logits", "logits",
      sub(LOGITS_CHAIN, "-F.one_hot(y, vocab_size) / (p * y.numel())", "-F.one_hot(y, vocab_size) * p / y.numel()"),
      "d(-log p)/dp taken as -p (multiplied by p) instead of -1/p", W_LOG)

# ---- WRONG: a bias gradient summed down to a scalar --------------------------------
wrong("flat_db_summed_to_scalar", "flat", "b", sub(FLAT, "db = dlogits.sum(0)", "db = dlogits.sum()"),
      "dlogits.sum() sums the vocabulary axis too: db becomes one number instead of one entry per "
      "character", W_SCALAR)
wrong("img_dkb_summed_to_scalar", "img", "kb", sub(IMG_PAD, "dkb = dhpre.sum(dim=(0, 2, 3))", "dkb = dhpre.sum()"),
      "dhpre.sum() sums the maps too: dkb becomes one number instead of one per feature map",
      W_SCALAR)

# ---- WRONG: the max-pool's ties broken toward the last entry -----------------------
wrong("h_running_max_ties_last", "h", "h", sub(H_RUNNING, "take = cand > best", "take = cand >= best"),
      "cand >= best: on a tie (a window of ReLU zeros) the later entry takes over, so the gradient "
      "goes to the window's last maximum instead of the first, where max_pool2d sends it", W_TIE_LAST)
wrong("h_unfold_argsort_last", "h", "h",
      sub(H_UNFOLD, "win.argmax(1)", "win.argsort(1)[:, -1]"),
      "the winner taken as the last column of argsort: among tied entries it is not the first one, "
      "which max_pool2d picks", W_TIE_LAST)

# ---- WRONG: the convolution's gradients padded by k - 1 ----------------------------
wrong("img_dimg_padded_by_two", "img", "img", sub(IMG_PAD, "F.pad(dhpre, (1, 1, 1, 1))", "F.pad(dhpre, (2, 2, 2, 2))"),
      "dhpre padded by kernel_size - 1 = 2 as for a full convolution: the forward padded by 1, so "
      "the input gradient needs padding 1 and comes out 10x10 here", W_PAD)
wrong("img_dK_padded_by_two", "img", "K",
      sub(IMG_PAD, "dhpre.transpose(0, 1), padding=1)", "dhpre.transpose(0, 1), padding=2)"),
      "the weight gradient's correlation padded by 2 instead of the forward's 1: dK comes out 5x5",
      W_PAD)

# ---- WRONG: .T on the 4-D kernel ------------------------------------------------------
wrong("img_kernel_dot_T", "img", "img", sub(IMG_PAD, "K.flip(2, 3).transpose(0, 1)", "K.flip(2, 3).T"),
      "K.T on the (maps, 1, 3, 3) kernel reverses all four axes instead of swapping the two "
      "channel axes (transpose(0, 1))", W_4D_T)
wrong("img_dK_result_dot_T", "img", "K",
      sub(IMG_PAD, "dhpre.transpose(0, 1), padding=1).transpose(0, 1)", "dhpre.transpose(0, 1), padding=1).T"),
      "the correlation's (1, maps, 3, 3) result turned back with .T, which reverses all four axes, "
      "instead of swapping the channel pair with transpose(0, 1)", W_4D_T)

# ---- WRONG: an in-place backward on a gradient that is still needed -----------------
wrong("hpre_in_place_on_dh", "hpre", "hpre", "dhpre = dh\ndhpre[hpre <= 0] = 0\n",
      "dhpre = dh is the same tensor, not a copy: zeroing its entries in place also overwrites dh, "
      "the pool's gradient (dh.clone() belongs there)", W_IN_PLACE)
