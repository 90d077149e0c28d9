"""2-D CNN lesson (cnn2d_pack, made by `pack new` from tests/packs/forward/slips_cnn2d.py): a
ninth slip corpus, TUNE half only (there is no other half).

What it is: rows of backward-pass code as a learner would type them into one step of the lesson.
Every RIGHT row passes the tutor's check; every WRONG row carries one slip that learners really
make with these operations and fails it. The slip families stay away from the ones tune5 / tune6
/ tune7 / tune8 use: the cross-entropy's chain stopped one op early (the gradient with respect
to the probabilities, -onehot / (n * P), handed back as dlogits); the softmax's Jacobian built
with an inner product where the outer product p p^T belongs; the ReLU's local derivative
skipped, dh passed straight through; a forward value typed where its gradient belongs, the `d`
dropped (logits for dlogits in dflat, pooled for dpooled in the max-pool's scatter, h for dh at
the ReLU, hpre for dhpre in dK, emb for demb in dC); every weight gradient (W, K, C) taken as the
outer product of sums over the batch (and positions) instead of the sum of the per-example
products; the gradient of a sum or of a fan-out divided among the terms instead of passed whole
to each (db and dkb halved as if the bias and the product shared it, the image's gradient
averaged over the 8 maps it feeds instead of summed); and the square maps' two spatial axes
swapped, a (height, width) = (positions, embedding dims) layout read as (width, height): the
flatten undone column-major, the max-pool's scattered positions read back as (width, height),
the unsqueeze undone with a transpose. The same slip family is put on every step where its
operation occurs and the shapes let it through.

Style: a mix within the file, as different learners would write it: a softmax minus one at the
targets through fancy indexing and in-place `-=` / `/=`, an explicit softmax Jacobian with
torch.diag_embed and torch.bmm, plain `@` with .T for the linear layer, unflatten, the max-pool
routed by scattering into zeros with max_pool2d's return_indices, torch.where for the ReLU,
F.unfold / F.fold with torch.einsum and F.conv_transpose2d / F.conv2d for the convolution,
squeeze for the unsqueeze, F.one_hot with einsum and index_add_ for the embedding. It was written
apart from the diagnosis code, without reading it, and each row was checked with
`backprop-tutor check --json` looking at "passed" only: `words` are the writer's own guess at
what a specific diagnosis of the slip would say (any one of them is enough), not copied from the
tutor's messages.

RIGHT = {name: (step_id, tensor, code, "")}
WRONG = {name: (step_id, tensor, code, slip, words)}
"""
S = "cnn2d_pack/"

W_STOPPED = ("probabilities", "chain", "softmax", "stopped", "logits", "jacobian")
W_OUTER = ("outer", "inner", "jacobian", "product", "softmax", "diagonal")
W_SKIPPED = ("relu", "skipped", "derivative", "mask", "straight", "missing")
W_VALUE = ("forward", "value", "gradient", "instead", "activation", "typo")
W_SUMFIRST = ("outer", "sum", "batch", "positions", "product", "before")
W_SPLIT = ("half", "split", "whole", "average", "divided", "maps")
W_AXES = ("height", "width", "swapped", "transpose", "axes", "layout")

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
LOGITS = ("dlogits = torch.softmax(logits, 1)\n"
          "dlogits[torch.arange(n), Yb] -= 1\n"
          "dlogits /= n\n")
# -log p[target] first, then the softmax's Jacobian example by example
LOGITS_JAC = ("P = F.softmax(logits, dim=1)\n"
              "dP = -F.one_hot(Yb, vocab_size).float() / (n * P)\n"
              "J = torch.diag_embed(P) - P.unsqueeze(2) @ P.unsqueeze(1)\n"
              "dlogits = torch.bmm(J, dP.unsqueeze(2)).squeeze(2)\n")
FLAT = ("dflat = dlogits @ W.T\n"
        "dW = flat.T @ dlogits\n"
        "db = dlogits.sum(0)\n")
POOLED = "dpooled = dflat.unflatten(1, (n_maps, block_size // 2, n_embd // 2))\n"
H = ("_, idx = F.max_pool2d(h, 2, return_indices=True)\n"
     "dh = torch.zeros_like(h).flatten(2)\n"
     "dh.scatter_(2, idx.flatten(2), dpooled.flatten(2))\n"
     "dh = dh.view(n, n_maps, block_size, n_embd)\n")
HPRE = "dhpre = torch.where(hpre > 0, dh, torch.zeros_like(dh))\n"
IMG = ("dimg = F.conv_transpose2d(dhpre, K, padding=1)\n"
       "dK = F.conv2d(img.transpose(0, 1), dhpre.transpose(0, 1), padding=1).transpose(0, 1)\n"
       "dkb = dhpre.sum((0, 2, 3))\n")
# the convolution as a product with the unfolded image: cols is (n, 9, 64)
IMG_UNFOLD = ("cols = F.unfold(img, kernel_size, padding=1)\n"
              "g = dhpre.flatten(2)\n"
              "Km = K.view(n_maps, -1)\n"
              "dK = torch.einsum('nmp,nkp->mk', g, cols).view_as(K)\n"
              "dcols = torch.einsum('mk,nmp->nkp', Km, g)\n"
              "dimg = F.fold(dcols, (block_size, n_embd), kernel_size, padding=1)\n"
              "dkb = torch.einsum('nmp->m', g)\n")
EMB = "demb = dimg.squeeze(1)\n"
C_ONE_HOT = "dC = torch.einsum('ntv,nte->ve', F.one_hot(Xb, vocab_size).float(), demb)\n"
C_INDEX_ADD = "dC = torch.zeros_like(C).index_add_(0, Xb.view(-1), demb.reshape(-1, n_embd))\n"

# ---- RIGHT ---------------------------------------------------------------------------
right("logits_fancy_index", "logits", "logits", LOGITS)
right("logits_explicit_jacobian", "logits", "logits", LOGITS_JAC)
right("flat_matmuls", "flat", "W", FLAT)
right("pooled_unflatten", "pooled", "pooled", POOLED)
right("h_scatter_indices", "h", "h", H)
right("img_unfold_einsum", "img", "K", IMG_UNFOLD)
right("emb_squeeze", "emb", "emb", EMB)
right("C_one_hot_einsum", "C", "C", C_ONE_HOT)

# ---- WRONG: the cross-entropy's chain stopped at the probabilities -------------------
wrong("logits_gradient_wrt_probs", "logits", "logits",
      "P = F.softmax(logits, dim=1)\n"
      "dlogits = -F.one_hot(Yb, vocab_size).float() / (n * P)\n",
      "-onehot / (n * P) is the gradient with respect to the probabilities: the softmax is never "
      "backpropagated", W_STOPPED)

# ---- WRONG: inner product where the softmax Jacobian's outer product belongs --------
wrong("logits_jacobian_inner_product", "logits", "logits",
      sub(LOGITS_JAC, "P.unsqueeze(2) @ P.unsqueeze(1)", "P.unsqueeze(1) @ P.unsqueeze(2)"),
      "p^T p, a 1x1 inner product broadcast over the matrix, where the Jacobian needs p p^T",
      W_OUTER)

# ---- WRONG: the ReLU's derivative skipped -------------------------------------------
wrong("hpre_relu_passed_through", "hpre", "hpre", "dhpre = dh.clone()\n",
      "dh copied to dhpre: the ReLU's 0/1 slope is left out, negative pre-activations get gradient",
      W_SKIPPED)

# ---- WRONG: a forward value where its gradient belongs (the `d` dropped) ------------
wrong("flat_dflat_from_logits", "flat", "flat", sub(FLAT, "dflat = dlogits @ W.T", "dflat = logits @ W.T"),
      "logits @ W.T: the forward logits where dlogits belongs", W_VALUE)
wrong("h_scatter_pooled_values", "h", "h", sub(H, "dpooled.flatten(2))", "pooled.flatten(2))"),
      "the pooled maxima themselves scattered back instead of their gradient dpooled",
      W_VALUE + ("pool",))
wrong("hpre_h_for_dh", "hpre", "hpre", sub(HPRE, "hpre > 0, dh,", "hpre > 0, h,"),
      "torch.where keeps h, the ReLU's output, where the incoming gradient dh belongs", W_VALUE)
wrong("img_dK_from_hpre", "img", "K", sub(IMG, "img.transpose(0, 1), dhpre.transpose", "img.transpose(0, 1), hpre.transpose"),
      "dK correlates the image with hpre, the forward maps, instead of dhpre", W_VALUE)
wrong("C_rows_from_emb", "C", "C", sub(C_INDEX_ADD, "demb.reshape", "emb.reshape"),
      "the embedding rows emb scattered into dC instead of their gradient demb", W_VALUE)

# ---- WRONG: a weight gradient as the outer product of sums --------------------------
wrong("flat_dW_outer_of_sums", "flat", "W", sub(FLAT, "dW = flat.T @ dlogits", "dW = flat.sum(0)[:, None] * dlogits.sum(0)[None, :]"),
      "flat and dlogits summed over the batch first, then multiplied: the product of sums is not the "
      "sum of products", W_SUMFIRST)
wrong("img_dK_outer_of_sums", "img", "K",
      sub(IMG_UNFOLD, "torch.einsum('nmp,nkp->mk', g, cols)", "(g.sum(0) @ cols.sum(0).T)"),
      "dK from dhpre and the unfolded image each summed over the batch before the product",
      W_SUMFIRST + ("kernel",))
wrong("C_dC_outer_of_sums", "C", "C",
      "dC = F.one_hot(Xb, vocab_size).float().sum((0, 1)).unsqueeze(1) * demb.sum((0, 1))\n",
      "character counts times the total gradient: the one-hot and demb summed before the product",
      W_SUMFIRST + ("count",))

# ---- WRONG: the gradient of a sum / a fan-out divided among its terms ---------------
wrong("flat_db_halved", "flat", "b", sub(FLAT, "db = dlogits.sum(0)", "db = dlogits.sum(0) / 2"),
      "db halved as if flat @ W and b shared the gradient of their sum", W_SPLIT)
wrong("img_dkb_halved", "img", "kb", sub(IMG, "dkb = dhpre.sum((0, 2, 3))", "dkb = dhpre.sum((0, 2, 3)) / 2"),
      "dkb halved: the convolution and its bias each given half of dhpre", W_SPLIT)
wrong("img_maps_averaged", "img", "img",
      sub(IMG_UNFOLD, "dcols = torch.einsum('mk,nmp->nkp', Km, g)", "dcols = torch.einsum('mk,nmp->nmkp', Km, g).mean(1)"),
      "the image feeds all 8 maps: their gradients averaged over the maps instead of summed",
      W_SPLIT + ("sum",))

# ---- WRONG: height and width swapped on the square maps -----------------------------
wrong("pooled_unflatten_column_major", "pooled", "pooled",
      "dpooled = dflat.view(n, n_maps, n_embd // 2, block_size // 2).transpose(2, 3)\n",
      "the flatten undone column-major, width before height: each map's rows and columns are swapped",
      W_AXES + ("flatten",))
wrong("h_positions_read_width_first", "h", "h",
      sub(H, "dh = dh.view(n, n_maps, block_size, n_embd)\n", "dh = dh.view(n, n_maps, n_embd, block_size).transpose(2, 3)\n"),
      "the scattered flat positions read back as (width, height): dh lands on the mirrored cell",
      W_AXES + ("pool",))
wrong("emb_unsqueeze_undone_transposed", "emb", "emb", "demb = dimg.squeeze(1).transpose(1, 2)\n",
      "dimg's height (positions) and width (embedding dims) swapped when the channel is squeezed",
      W_AXES)
