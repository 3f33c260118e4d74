"""Tessera from Python: train a model file on numpy arrays (or h5py data sets, or anything indexed by
sample) and predict with it, through libtessera's C API (ctypes; nothing to compile).

    import numpy as np, tessera
    with tessera.Context(workers=2, seed=1) as ctx:
        model = tessera.Model(ctx, "model.json", batch=32)
        history = model.fit(x, y, epochs=5, val=(xv, yv))    # arrays [N, C, H, W], float32
        model.save_params("params.h5")
        pred = model.predict(xv)

Training follows tessera-train step for step: each epoch's order comes from the library
(tsr_loader_epoch_indices: seed and epoch), the inputs are standardised per channel with the
statistics tessera-train's loader takes (256 evenly spaced samples), and samples are copied into the
library's buffers by a fill callback that its load tasks call. With the same seed, batch, slices and
workers and deterministic=True, the losses equal tessera-train's bitwise. Under mpirun every rank
runs the script and trains on its shard of each epoch.
"""
import atexit
import ctypes

import numpy as np

from . import _lib

__all__ = ["Context", "Model", "Error"]

_STATS_SAMPLES = 256  # tessera-train's loader: the samples its input statistics are taken from
_TARGET_STATS_SAMPLES = 4096  # tessera-train --standardize-targets: the samples its target statistics use


class Error(RuntimeError):
    """A libtessera call failed; the message is the library's (it names the file, layer or shape)."""


_lib_handle = None


def _L():
    global _lib_handle
    if _lib_handle is None:
        _lib_handle = _lib.load()
    return _lib_handle


def _check(status, what):
    if status != 0:
        L = _L()
        raise Error("%s: %s (%s)" % (what, L.tsr_last_error().decode(), L.tsr_status_name(status).decode()))


class Context:
    """StarPU (and StarPU-MPI under mpirun) for this process; one at a time. workers: CPU workers
    (None: StarPU's choice); deterministic: fixed reduction order, bitwise-repeatable runs."""

    def __init__(self, workers=None, seed=1, deterministic=False, verbose=0):
        L = _L()
        o = _lib.ContextOpts()
        L.tsr_context_opts_default(ctypes.byref(o))
        o.ncpus = -1 if workers is None else int(workers)
        o.seed, o.deterministic, o.verbose = int(seed), int(bool(deterministic)), int(verbose)
        self._h = ctypes.c_void_p()
        _check(L.tsr_context_create(ctypes.byref(self._h), ctypes.byref(o), None, None), "tessera.Context")
        self._models = []
        self.rank, self.size = L.tsr_context_rank(self._h), L.tsr_context_size(self._h)
        self.seed = L.tsr_context_seed(self._h)
        atexit.register(self.close)  # StarPU's threads must stop before the interpreter does

    def close(self):
        """Destroys the models made on this context, then the context (StarPU stops)."""
        if self._h:
            for m in self._models:
                m.close()
            _L().tsr_context_destroy(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _rows(src, idx):
    """Samples idx of an array-like source (numpy array, h5py data set, list) as float32 C order."""
    if isinstance(src, np.ndarray):
        return np.ascontiguousarray(src[idx], dtype=np.float32)
    return np.ascontiguousarray(np.stack([np.asarray(src[int(i)]) for i in idx]), dtype=np.float32)


class Model:
    """A model file bound to a context: parameters, optimizer state and the task graph of a step.
    batch: samples per step on this rank; slices: micro-batch slices (0: one per worker); lr:
    overrides the model file's learning rate; staleness: stale-synchronous steps across ranks
    (tessera-train --staleness); async_slices: slices update the parameters without waiting for each
    other (--async-slices; batch norm then normalises each slice with its own statistics). Both are
    refused in a deterministic context."""

    def __init__(self, ctx, model_file, batch=32, slices=0, lr=None, staleness=0, async_slices=False):
        L = _L()
        self._ctx, self._t, self._m = ctx, ctypes.c_void_p(), ctypes.c_void_p()
        opt = _lib.OptimSpec()
        _check(L.tsr_model_load_json(ctypes.byref(self._m), ctypes.byref(opt), str(model_file).encode()),
               "model file %s" % model_file)
        if lr is not None:
            opt.lr = float(lr)
        o = _lib.TrainerOpts()
        L.tsr_trainer_opts_default(ctypes.byref(o))
        o.batch, o.slices, o.window = int(batch), int(slices), 2
        o.staleness, o.async_slices = int(staleness), int(bool(async_slices))
        o.check_finite = 1  # as tessera-train (it adds check tasks, it changes no value)
        status = L.tsr_trainer_create(ctypes.byref(self._t), ctx._h, self._m, ctypes.byref(opt), ctypes.byref(o))
        if status != 0:
            msg = L.tsr_last_error().decode()
            L.tsr_model_destroy(self._m)
            self._m = None
            raise Error("tessera.Model(%s): %s" % (model_file, msg))
        ctx._models.append(self)
        self.batch, self.epoch = int(batch), 0
        dims = [ctypes.c_int() for _ in range(6)]
        L.tsr_trainer_input_shape(self._t, *[ctypes.byref(d) for d in dims[:3]])
        L.tsr_trainer_target_shape(self._t, *[ctypes.byref(d) for d in dims[3:]])
        self.input_shape = tuple(d.value for d in dims[:3])
        self.target_shape = tuple(d.value for d in dims[3:])
        # Load tasks call back here from StarPU's worker threads: user is the key of a submitted
        # step in self._steps, which holds its sources and sample indices until its loss is read.
        self._steps, self._next_key, self._fill_error = {}, 1, None
        self._fill_fn = _lib.SampleFn(self._fill)

    def close(self):
        if self._t:
            _L().tsr_trainer_destroy(self._t)
            _L().tsr_model_destroy(self._m)
            self._t = self._m = None

    # ---- data ----

    def _fill(self, user, step, index, x, y):
        try:
            xs, ys, idx = self._steps[user]
            i = int(idx[index])
            a = np.ascontiguousarray(xs[i], dtype=np.float32)
            ctypes.memmove(x, a.ctypes.data, a.nbytes)
            if ys is not None:
                b = np.ascontiguousarray(ys[i], dtype=np.float32)
                ctypes.memmove(y, b.ctypes.data, b.nbytes)
            else:
                ctypes.memset(y, 0, 4 * int(np.prod(self.target_shape)))
            return 0
        except Exception as e:  # reported by the step's caller: an exception must not cross C
            self._fill_error = self._fill_error or e
            return 1

    def _check_source(self, x, y, what):
        if len(x) == 0 or tuple(x.shape[1:]) != self.input_shape:
            raise ValueError("%s: inputs of shape %s; the model takes [N, %d, %d, %d]" % ((what, tuple(x.shape)) + self.input_shape))
        if y is not None and (len(y) != len(x) or tuple(y.shape[1:]) != self.target_shape):
            raise ValueError("%s: targets of shape %s for %d inputs; the model outputs [N, %d, %d, %d]"
                             % ((what, tuple(y.shape), len(x)) + self.target_shape))

    def _submit(self, train, x, y, idx, nvalid):
        key, self._next_key = self._next_key, self._next_key + 1
        self._steps[key] = (x, y, idx)
        sid = ctypes.c_int64()
        L = _L()
        if train:
            status = L.tsr_trainer_step(self._t, self._fill_fn, ctypes.c_void_p(key), ctypes.byref(sid))
        else:
            status = L.tsr_trainer_eval(self._t, self._fill_fn, ctypes.c_void_p(key), nvalid, ctypes.byref(sid))
        _check(status, "training step" if train else "evaluation step")
        return key, sid.value

    def _loss(self, key, sid):
        loss = ctypes.c_double()
        status = _L().tsr_trainer_loss(self._t, sid, ctypes.byref(loss))
        del self._steps[key]
        if self._fill_error is not None:
            e, self._fill_error = self._fill_error, None
            raise Error("reading a sample failed: %r" % e) from e
        _check(status, "step %d" % sid)
        return loss.value

    # ---- input normalisation ----

    def has_input_norm(self):
        mean, std = ctypes.POINTER(ctypes.c_float)(), ctypes.POINTER(ctypes.c_float)()
        _L().tsr_trainer_input_norm(self._t, ctypes.byref(mean), ctypes.byref(std))
        return bool(mean)

    def standardize(self, x):
        """Sets the per-channel input normalisation from x as tessera-train does: mean and standard
        deviation over 256 evenly spaced samples, summed in float64 in the loader's order."""
        n = len(x)
        k = min(_STATS_SAMPLES, n)
        rows = _rows(x, [i * n // k for i in range(k)]).astype(np.float64)
        c = rows.shape[1]
        per_channel = rows.transpose(1, 0, 2, 3).reshape(c, -1)
        # cumsum adds in sequence, as the loader's loop does (np.sum's pairwise sums round otherwise)
        s1, s2 = np.cumsum(per_channel, axis=1)[:, -1], np.cumsum(per_channel * per_channel, axis=1)[:, -1]
        mean = s1 / per_channel.shape[1]
        var = s2 / per_channel.shape[1] - mean * mean
        std = np.where(var > 1e-24, np.sqrt(np.maximum(var, 0)), 1.0)
        m32, s32 = mean.astype(np.float32), std.astype(np.float32)
        fp = ctypes.POINTER(ctypes.c_float)
        _check(_L().tsr_trainer_set_input_norm(self._t, m32.ctypes.data_as(fp), s32.ctypes.data_as(fp), c),
               "input normalisation")

    # ---- target standardisation ----

    def target_norm(self):
        """The target standardisation as (mean, std) float32 arrays [output channels], or None."""
        mean, std = ctypes.POINTER(ctypes.c_float)(), ctypes.POINTER(ctypes.c_float)()
        _L().tsr_trainer_target_norm(self._t, ctypes.byref(mean), ctypes.byref(std))
        if not mean:
            return None
        c = self.target_shape[0]
        return (np.ctypeslib.as_array(mean, (c,)).copy(), np.ctypeslib.as_array(std, (c,)).copy())

    def standardize_targets(self, y):
        """Sets the per-channel target standardisation from y as tessera-train --standardize-targets
        does: mean, then standard deviation around it, over every pixel of up to 4096 evenly spaced
        samples, summed in float64 in the same order. The trainer then computes the loss against
        (y - mean) / std and returns predictions in y's units; fit and evaluate report losses in y's
        units where one factor converts them (MSE, L1 with one std for all channels)."""
        n = len(y)
        k = min(_TARGET_STATS_SAMPLES, n)
        rows = _rows(y, [i * n // k for i in range(k)]).astype(np.float64)
        c = rows.shape[1]
        per_channel = rows.transpose(1, 0, 2, 3).reshape(c, -1)
        mean = np.cumsum(per_channel, axis=1)[:, -1] / per_channel.shape[1]
        var = np.cumsum((per_channel - mean[:, None]) ** 2, axis=1)[:, -1] / per_channel.shape[1]
        if not np.all(var > 0):
            ch = int(np.argmin(var > 0))
            raise ValueError("standardize_targets: target channel %d is constant (%g) over %d samples"
                             % (ch, mean[ch], k))
        m32, s32 = mean.astype(np.float32), np.sqrt(var).astype(np.float32)
        fp = ctypes.POINTER(ctypes.c_float)
        _check(_L().tsr_trainer_set_target_norm(self._t, m32.ctypes.data_as(fp), s32.ctypes.data_as(fp), c),
               "target standardisation")

    def _loss_factor(self):
        f = _L().tsr_trainer_target_loss_factor(self._t)
        return 1.0 if f != f else f  # NaN: no one factor converts the loss; it stays standardised

    # ---- training, evaluation, prediction ----

    def fit(self, x, y, epochs=1, val=None, standardize=None, standardize_targets=False, verbose=False):
        """Trains for `epochs` more epochs on samples x[i] -> y[i] (numpy arrays, h5py data sets, or
        anything with len() and [i]); the last partial batch of each epoch is dropped. standardize:
        None sets the input normalisation from x unless the model has one (loaded parameters carry
        theirs), True always, False never. standardize_targets: True sets the target standardisation
        from y first (standardize_targets()). val=(xv, yv): evaluated after every epoch. Returns a dict
        with the per-step training losses ("loss"), their mean per epoch ("epoch_loss") and the
        validation losses ("val_loss")."""
        self._check_source(x, y, "fit")
        if val is not None:
            self._check_source(val[0], val[1], "fit(val=...)")
        if standardize or (standardize is None and not self.has_input_norm()):
            self.standardize(x)
        if standardize_targets:
            self.standardize_targets(y)
        factor = self._loss_factor()
        L, ctx = _L(), self._ctx
        n = len(x)
        steps = n // (self.batch * ctx.size)
        if steps == 0:
            raise ValueError("fit: %d samples make no full batch of %d x %d rank(s)" % (n, self.batch, ctx.size))
        order = np.empty(L.tsr_loader_shard_size(n, ctx.rank, ctx.size), dtype=np.int64)
        history = {"loss": [], "epoch_loss": [], "val_loss": []}
        for _ in range(int(epochs)):
            self.epoch += 1
            _check(L.tsr_loader_epoch_indices(n, ctx.seed, self.epoch, ctx.rank, ctx.size,
                                              order.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))), "epoch order")
            pending = [self._submit(True, x, y, order[s * self.batch:(s + 1) * self.batch].copy(), self.batch)
                       for s in range(steps)]  # the trainer blocks while 2 steps are in flight
            losses = [self._loss(k, sid) * factor for k, sid in pending]
            history["loss"] += losses
            history["epoch_loss"].append(sum(losses) / len(losses))
            if val is not None:
                history["val_loss"].append(self.evaluate(*val))
            if verbose and ctx.rank == 0:
                print("epoch %d: train loss %.6g%s" % (self.epoch, history["epoch_loss"][-1],
                      ", val loss %.6g" % history["val_loss"][-1] if val is not None else ""))
        return history

    def evaluate(self, x, y):
        """Mean loss over all samples of (x, y), in eval mode (as tessera-train's validation); in the
        targets' units under target standardisation where one factor converts it."""
        self._check_source(x, y, "evaluate")
        n, total, pending = len(x), 0.0, []
        for b in range(0, n, self.batch):
            nvalid = min(self.batch, n - b)
            idx = np.array([b + (i if i < nvalid else 0) for i in range(self.batch)], dtype=np.int64)
            pending.append((self._submit(False, x, y, idx, nvalid), nvalid))
        factor = self._loss_factor()
        for (key, sid), nvalid in pending:
            total += self._loss(key, sid) * factor * nvalid
        return total / n

    def predict(self, x):
        """The model's outputs for inputs x ([N, C, H, W], raw: the input normalisation is applied),
        as a float32 array [N, C', H', W']."""
        self._check_source(x, None, "predict")
        n = len(x)
        out = np.empty((n,) + self.target_shape, dtype=np.float32)
        fp = ctypes.POINTER(ctypes.c_float)
        for b in range(0, n, self.batch):
            rows = _rows(x, range(b, min(n, b + self.batch)))
            part = np.empty((len(rows),) + self.target_shape, dtype=np.float32)
            _check(_L().tsr_trainer_predict(self._t, rows.ctypes.data_as(fp), len(rows), part.ctypes.data_as(fp)),
                   "predict")
            out[b:b + len(rows)] = part
        return out

    # ---- parameters ----

    def load_params(self, path):
        """Parameters (and their input and target standardisation) from an .h5 file or a folder of .npy files, in
        PyTorch's names and layouts (tessera-train --export-params, or a converted state_dict)."""
        _check(_L().tsr_params_import(self._t, str(path).encode()), "load_params")

    def save_params(self, path):
        """Writes the parameters and the input and target standardisation (.h5 file or folder of .npy files)."""
        _check(_L().tsr_params_export(self._t, str(path).encode()), "save_params")

