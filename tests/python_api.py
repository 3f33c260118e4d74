"""The Python package (python/tessera) against tessera-train, run by tests/python_api.sh:
  python_api.py data DIR    writes DIR/{train,val}_{x,y}.npy (targets: a 3x3 blur of the inputs)
  python_api.py check DIR   after tessera-train has trained on them (DIR/steps.csv, DIR/log.csv,
                            DIR/params/; with --standardize-targets on the targets y2: DIR/steps2.csv,
                            DIR/log2.csv): trains the same from numpy arrays (and h5py data sets when
                            h5py is installed) and predicts; prints PASS/FAIL lines, exits 1 on a FAIL.
Settings shared with the shell script: seed 3, batch 8, 2 slices, 1 worker, 3 epochs, deterministic."""
import csv
import os
import sys

import numpy as np

SEED, BATCH, SLICES, WORKERS, EPOCHS = 3, 8, 2, 1, 3
failures = 0


def report(ok, what):
    global failures
    print(("PASS: " if ok else "FAIL: ") + what)
    failures += 0 if ok else 1


def make_data(d):
    rng = np.random.default_rng(11)
    for name, n in (("train", 64), ("val", 20)):
        x = (3 + 2 * rng.standard_normal((n, 1, 16, 16))).astype(np.float32)
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        y = sum(xp[:, :, i:i + 16, j:j + 16] for i in range(3) for j in range(3)) / 9
        np.save(os.path.join(d, name + "_x.npy"), x)
        np.save(os.path.join(d, name + "_y.npy"), (0.5 * y - 1).astype(np.float32))
        # the same targets far from 0 and 1, as a physical quantity (e.g. a potential in V A) is
        np.save(os.path.join(d, name + "_y2.npy"), (40 * y + 120).astype(np.float32))


def conv(x, w, b):
    """float64 reference of a stride-1 'same' convolution (PyTorch's cross-correlation, OIHW)."""
    k, (n, _, h, wd) = w.shape[2], x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (k // 2, k // 2), (k // 2, k // 2)))
    out = np.zeros((n, w.shape[0], h, wd))
    for i in range(k):
        for j in range(k):
            out += np.einsum("nchw,oc->nohw", xp[:, :, i:i + h, j:j + wd], w[:, :, i, j])
    return out + b[None, :, None, None]


def reference_forward(pdir, x):
    p = {f[:-4]: np.load(os.path.join(pdir, f)).astype(np.float64) for f in os.listdir(pdir) if f.endswith(".npy")}
    xn = (x - p["input_mean"][None, :, None, None]) / p["input_std"][None, :, None, None]
    return conv(np.maximum(conv(xn, p["c1.weight"], p["c1.bias"]), 0), p["c2.weight"], p["c2.bias"])


def check(d):
    import tessera

    data = {k: np.load(os.path.join(d, k + ".npy")) for k in ("train_x", "train_y", "val_x", "val_y")}
    with open(os.path.join(d, "steps.csv")) as f:
        c_steps = [float(r["train_loss"]) for r in csv.DictReader(f)]
    with open(os.path.join(d, "log.csv")) as f:
        c_val = [float(r["val_loss"]) for r in csv.DictReader(f)]
    model_file = os.path.join(d, "model.json")
    with tessera.Context(workers=WORKERS, seed=SEED, deterministic=True) as ctx:
        m = tessera.Model(ctx, model_file, batch=BATCH, slices=SLICES)
        h = m.fit(data["train_x"], data["train_y"], epochs=EPOCHS, val=(data["val_x"], data["val_y"]))
        report(h["loss"] == c_steps,
               "training from numpy arrays gives tessera-train's %d step losses bitwise (first %.9g, last %.9g)"
               % (len(c_steps), h["loss"][0], h["loss"][-1]))
        report(len(h["val_loss"]) == EPOCHS and
               all(abs(a - b) <= 1e-7 * abs(b) for a, b in zip(h["val_loss"], c_val)),
               "validation losses equal tessera-train's log (%%.9g there: relative 1e-7): %s"
               % " ".join("%.6g" % v for v in h["val_loss"]))
        report(h["epoch_loss"][-1] < 0.5 * h["epoch_loss"][0],
               "training lowers the loss: epoch means %s" % " ".join("%.4g" % v for v in h["epoch_loss"]))
        m.save_params(os.path.join(d, "py_params"))
        same = all(np.array_equal(np.load(os.path.join(d, "params", f)), np.load(os.path.join(d, "py_params", f)))
                   for f in os.listdir(os.path.join(d, "params")))
        report(same and sorted(os.listdir(os.path.join(d, "params"))) == sorted(os.listdir(os.path.join(d, "py_params"))),
               "the parameters saved from Python equal tessera-train's export bitwise")

        # Prediction with tessera-train's exported parameters, in a second model of the same context.
        p = tessera.Model(ctx, model_file, batch=BATCH)
        p.load_params(os.path.join(d, "params"))
        pred = p.predict(data["val_x"])
        ref = reference_forward(os.path.join(d, "params"), data["val_x"].astype(np.float64))
        err, scale = float(np.max(np.abs(pred - ref))), float(np.max(np.abs(ref)))
        report(pred.shape == (20, 1, 16, 16) and err <= 1e-5 * (1 + scale),
               "predict on 20 samples (batches of 8 and a partial one) equals a float64 numpy forward pass "
               "within 1e-5 x (1 + max |output|) (max difference %.2g, max |output| %.3g)" % (err, scale))
        mse = float(np.mean((pred.astype(np.float64) - data["val_y"]) ** 2))
        report(abs(mse - c_val[-1]) <= 1e-5 * c_val[-1],
               "the mean squared error of the predictions (%.9g) equals tessera-train's last validation loss "
               "(%.9g) within relative 1e-5" % (mse, c_val[-1]))

        try:
            p.predict(data["val_x"][:, :, :8, :])
            report(False, "inputs of the wrong shape are refused")
        except ValueError as e:
            report("(20, 1, 8, 16)" in str(e) and "[N, 1, 16, 16]" in str(e), "inputs of the wrong shape are refused: %s" % e)
        try:
            tessera.Model(ctx, os.path.join(d, "missing.json"))
            report(False, "a missing model file is an error")
        except tessera.Error as e:
            report("missing.json" in str(e), "a missing model file is an error naming it: %s" % e)

        for kw, flag in (({"staleness": 1}, "staleness"), ({"async_slices": True}, "async")):
            try:
                tessera.Model(ctx, model_file, batch=BATCH, slices=SLICES, **kw)
                report(False, "%s reaches the trainer (refused in a deterministic context)" % kw)
            except tessera.Error as e:
                report(flag in str(e) and "deterministic" in str(e),
                       "%s reaches the trainer (refused in a deterministic context): %s" % (kw, e))

        check_target_norm(d, ctx, model_file)

        try:
            import h5py
        except ImportError:
            print("(h5py not installed: the h5py source is not checked)")
            return
        with h5py.File(os.path.join(d, "train.h5"), "w") as f:
            f["inputs"], f["targets"] = data["train_x"], data["train_y"]
        with h5py.File(os.path.join(d, "train.h5"), "r") as f:
            m2 = tessera.Model(ctx, model_file, batch=BATCH, slices=SLICES)
            h2 = m2.fit(f["inputs"], f["targets"], epochs=EPOCHS, val=(data["val_x"], data["val_y"]))
        report(h2["loss"] == c_steps, "training from h5py data sets gives the same step losses bitwise")


def check_target_norm(d, ctx, model_file):
    """Target standardisation from Python against tessera-train --standardize-targets on the same
    targets y2 = 40 y + 120 (bitwise in deterministic mode), predictions in y2's units, and the
    statistics carried by saved parameters."""
    import tessera

    data = {k: np.load(os.path.join(d, k + ".npy")) for k in ("train_x", "train_y2", "val_x", "val_y2")}
    with open(os.path.join(d, "steps2.csv")) as f:
        c_steps = [float(r["train_loss"]) for r in csv.DictReader(f)]
    with open(os.path.join(d, "log2.csv")) as f:
        c_val = [float(r["val_loss"]) for r in csv.DictReader(f)]
    m = tessera.Model(ctx, model_file, batch=BATCH, slices=SLICES)
    h = m.fit(data["train_x"], data["train_y2"], epochs=EPOCHS, val=(data["val_x"], data["val_y2"]),
              standardize_targets=True)
    mean, std = m.target_norm()
    y64 = data["train_y2"].astype(np.float64)
    report(abs(mean[0] - y64.mean()) <= 1e-6 * abs(y64.mean()) and abs(std[0] - y64.std()) <= 1e-6 * y64.std(),
           "the target statistics (mean %.7g, std %.7g) equal numpy's float64 mean and std of the 64 training "
           "targets within relative 1e-6" % (mean[0], std[0]))
    report(h["loss"] == c_steps,
           "with standardize_targets=True, fit gives tessera-train --standardize-targets' %d step losses bitwise, "
           "in target units (first %.9g, last %.9g)" % (len(c_steps), h["loss"][0], h["loss"][-1]))
    report(len(h["val_loss"]) == EPOCHS and all(abs(a - b) <= 1e-7 * abs(b) for a, b in zip(h["val_loss"], c_val)),
           "its validation losses equal tessera-train's log (relative 1e-7): %s" % " ".join("%.6g" % v for v in h["val_loss"]))
    pred = m.predict(data["val_x"])
    mse = float(np.mean((pred.astype(np.float64) - data["val_y2"]) ** 2))
    report(abs(mse - h["val_loss"][-1]) <= 1e-5 * h["val_loss"][-1] and abs(float(pred.mean()) - float(data["val_y2"].mean())) < float(std[0]),
           "predictions are in the targets' units: their mean squared error against y2 (%.9g) equals the last "
           "validation loss (%.9g) within relative 1e-5; mean prediction %.4g, of the targets %.4g (within one std)"
           % (mse, h["val_loss"][-1], pred.mean(), data["val_y2"].mean()))
    m.save_params(os.path.join(d, "py_params2"))
    p = tessera.Model(ctx, model_file, batch=BATCH)
    p.load_params(os.path.join(d, "py_params2"))
    norm = p.target_norm()
    report(norm is not None and norm[0][0] == mean[0] and norm[1][0] == std[0] and
           np.array_equal(p.predict(data["val_x"]), pred),
           "saved parameters carry the target statistics: a model that loads them predicts the same bits")
    try:
        m.standardize_targets(np.full_like(data["train_y2"], 7.0))
        report(False, "constant targets are refused")
    except ValueError as e:
        report("constant" in str(e), "constant targets are refused: %s" % e)


if __name__ == "__main__":
    if sys.argv[1] == "data":
        make_data(sys.argv[2])
    else:
        check(sys.argv[2])
        sys.exit(1 if failures else 0)
