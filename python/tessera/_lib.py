"""ctypes view of libtessera's public C API (include/tessera/*.h): finding the shared library, the
option structs the Python side fills, and the signatures of the calls it makes. Nothing here is
compiled: the library is the installed (or built) libtessera.so."""
import ctypes
import ctypes.util
import os
import shutil
import subprocess

c_int, c_int64, c_uint64, c_float, c_double, c_char_p, c_void_p = (
    ctypes.c_int, ctypes.c_int64, ctypes.c_uint64, ctypes.c_float, ctypes.c_double, ctypes.c_char_p,
    ctypes.c_void_p)
P = ctypes.POINTER

# Each struct mirrors its C declaration and ends with spare bytes: the library's *_default calls
# write the whole C struct, so a field appended to it in a later version lands there instead of
# past the end of the Python object.
_SPARE = ("_spare", ctypes.c_char * 256)


class ContextOpts(ctypes.Structure):  # tsr_context_opts, include/tessera/context.h
    _fields_ = [("ncpus", c_int), ("use_mpi", c_int), ("deterministic", c_int), ("seed", c_uint64),
                ("verbose", c_int), ("precision", c_int), _SPARE]


class OptimSpec(ctypes.Structure):  # tsr_optim_spec, include/tessera/train.h
    _fields_ = [("kind", c_int), ("lr", c_float), ("momentum", c_float), ("nesterov", c_int),
                ("weight_decay", c_float), ("beta1", c_float), ("beta2", c_float), ("eps", c_float),
                ("extra", c_float * 4), _SPARE]


class TrainerOpts(ctypes.Structure):  # tsr_trainer_opts, include/tessera/train.h
    _fields_ = [("batch", c_int), ("slices", c_int), ("window", c_int), ("seed", c_uint64),
                ("check_finite", c_int), ("group_bytes", ctypes.c_longlong), ("grad_reduce", c_int),
                ("loss_scale", c_double), ("loss_scale_init", c_double), ("loss_scale_interval", c_int),
                ("step_timeout", c_double), ("skip_reduce", c_int), ("nccl", c_int), ("collective", c_char_p),
                ("spatial", c_int * 3), ("staleness", c_int), ("async_slices", c_int), ("separate_grads", c_int),
                ("act_block", c_int), _SPARE]


# int fill(void *user, int64_t step, int index, float *x, float *y)
SampleFn = ctypes.CFUNCTYPE(c_int, c_void_p, c_int64, c_int, P(c_float), P(c_float))

_SIGNATURES = {
    "tsr_last_error": (c_char_p, []),
    "tsr_status_name": (c_char_p, [c_int]),
    "tsr_context_opts_default": (None, [P(ContextOpts)]),
    "tsr_context_create": (c_int, [P(c_void_p), P(ContextOpts), c_void_p, c_void_p]),
    "tsr_context_destroy": (None, [c_void_p]),
    "tsr_context_rank": (c_int, [c_void_p]),
    "tsr_context_size": (c_int, [c_void_p]),
    "tsr_context_seed": (c_uint64, [c_void_p]),
    "tsr_model_load_json": (c_int, [P(c_void_p), P(OptimSpec), c_char_p]),
    "tsr_model_destroy": (None, [c_void_p]),
    "tsr_model_name": (c_char_p, [c_void_p]),
    "tsr_trainer_opts_default": (None, [P(TrainerOpts)]),
    "tsr_trainer_create": (c_int, [P(c_void_p), c_void_p, c_void_p, P(OptimSpec), P(TrainerOpts)]),
    "tsr_trainer_destroy": (None, [c_void_p]),
    "tsr_trainer_input_shape": (None, [c_void_p, P(c_int), P(c_int), P(c_int)]),
    "tsr_trainer_target_shape": (None, [c_void_p, P(c_int), P(c_int), P(c_int)]),
    "tsr_trainer_step": (c_int, [c_void_p, SampleFn, c_void_p, P(c_int64)]),
    "tsr_trainer_eval": (c_int, [c_void_p, SampleFn, c_void_p, c_int, P(c_int64)]),
    "tsr_trainer_loss": (c_int, [c_void_p, c_int64, P(c_double)]),
    "tsr_trainer_sync": (c_int, [c_void_p]),
    "tsr_trainer_predict": (c_int, [c_void_p, P(c_float), c_int, P(c_float)]),
    "tsr_trainer_set_input_norm": (c_int, [c_void_p, P(c_float), P(c_float), c_int]),
    "tsr_trainer_input_norm": (None, [c_void_p, P(P(c_float)), P(P(c_float))]),
    "tsr_trainer_set_target_norm": (c_int, [c_void_p, P(c_float), P(c_float), c_int]),
    "tsr_trainer_target_norm": (None, [c_void_p, P(P(c_float)), P(P(c_float))]),
    "tsr_trainer_target_loss_factor": (c_double, [c_void_p]),
    "tsr_params_import": (c_int, [c_void_p, c_char_p]),
    "tsr_params_export": (c_int, [c_void_p, c_char_p]),
    "tsr_loader_epoch_indices": (c_int, [c_int64, c_uint64, c_int, c_int, c_int, P(c_int64)]),
    "tsr_loader_shard_size": (c_int64, [c_int64, c_int, c_int]),
}


def _candidates():
    env = os.environ.get("TESSERA_LIB")
    if env:
        return [env]
    found = []
    if shutil.which("pkg-config"):
        r = subprocess.run(["pkg-config", "--variable=libdir", "tessera"], capture_output=True, text=True)
        if r.returncode == 0 and r.stdout.strip():
            found.append(os.path.join(r.stdout.strip(), "libtessera.so.0"))
    name = ctypes.util.find_library("tessera")
    if name:
        found.append(name)
    return found + ["libtessera.so.0"]  # the dynamic loader's own search (LD_LIBRARY_PATH, ld.so.cache)


def load():
    """Opens libtessera: $TESSERA_LIB, else pkg-config's libdir, else the loader's search path."""
    errors = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)  # CDLL releases the GIL during calls: workers may call back
        except OSError as e:
            errors.append("%s: %s" % (path, e))
            continue
        for name, (res, args) in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        return lib
    raise OSError("libtessera not found (set TESSERA_LIB to its path, e.g. build/.libs/libtessera.so.0, or "
                  "PKG_CONFIG_PATH to the prefix's lib/pkgconfig after make install): " + "; ".join(errors))
