// The lists behind GlobalPolicy. Each says why its names are there; globals.cpp holds the rules
// that use them. Sorted arrays are checked sorted by tests/unit/globals_test.cpp.
#include "pickle/global_lists.hpp"

#include <algorithm>
#include <initializer_list>
#include <utility>
#include <vector>

namespace ckpt::global_lists {

namespace {

template <size_t N>
bool in_sorted(const std::string_view (&list)[N], std::string_view name) {
    return std::binary_search(std::begin(list), std::end(list), name);
}

// torch.load(weights_only=True)'s allow-list: `torch._weights_only_unpickler._get_allowed_globals()`
// of torch 2.6.0 (Debian 13's python3-torch), key by key, and of torch 1.13.1 (Debian 12's), which
// adds only `_rebuild_sparse_csr_tensor`. Everything here is rebuilt as data by this reader.
constexpr std::string_view k_weights_only[] = {
    "_codecs.encode", "builtins.bytearray", "builtins.complex", "builtins.set", "collections.Counter",
    "collections.OrderedDict", "torch.BFloat16Storage", "torch.BFloat16Tensor", "torch.BoolStorage",
    "torch.BoolTensor", "torch.ByteStorage", "torch.ByteTensor", "torch.CharStorage",
    "torch.CharTensor", "torch.ComplexDoubleStorage", "torch.ComplexFloatStorage",
    "torch.DoubleStorage", "torch.DoubleTensor", "torch.FloatStorage", "torch.FloatTensor",
    "torch.HalfStorage", "torch.HalfTensor", "torch.IntStorage", "torch.IntTensor",
    "torch.LongStorage", "torch.LongTensor", "torch.QInt32Storage", "torch.QInt8Storage",
    "torch.QUInt2x4Storage", "torch.QUInt4x2Storage", "torch.QUInt8Storage", "torch.ShortStorage",
    "torch.ShortTensor", "torch.Size", "torch.Tensor", "torch._tensor._rebuild_from_type_v2",
    "torch._utils._rebuild_device_tensor_from_cpu_tensor",
    "torch._utils._rebuild_device_tensor_from_numpy", "torch._utils._rebuild_meta_tensor_no_storage",
    "torch._utils._rebuild_nested_tensor", "torch._utils._rebuild_parameter",
    "torch._utils._rebuild_parameter_with_state", "torch._utils._rebuild_qtensor",
    "torch._utils._rebuild_sparse_csr_tensor", "torch._utils._rebuild_sparse_tensor",
    "torch._utils._rebuild_tensor", "torch._utils._rebuild_tensor_v2",
    "torch._utils._rebuild_tensor_v3", "torch._utils._rebuild_wrapper_subclass", "torch.bfloat16",
    "torch.bits16", "torch.bits1x8", "torch.bits2x4", "torch.bits4x2", "torch.bits8", "torch.bool",
    "torch.complex128", "torch.complex32", "torch.complex64", "torch.cuda.BFloat16Storage",
    "torch.cuda.BFloat16Tensor", "torch.cuda.BoolStorage", "torch.cuda.BoolTensor",
    "torch.cuda.ByteStorage", "torch.cuda.ByteTensor", "torch.cuda.CharStorage",
    "torch.cuda.CharTensor", "torch.cuda.ComplexDoubleStorage", "torch.cuda.ComplexFloatStorage",
    "torch.cuda.DoubleStorage", "torch.cuda.DoubleTensor", "torch.cuda.FloatStorage",
    "torch.cuda.FloatTensor", "torch.cuda.HalfStorage", "torch.cuda.HalfTensor",
    "torch.cuda.IntStorage", "torch.cuda.IntTensor", "torch.cuda.LongStorage", "torch.cuda.LongTensor",
    "torch.cuda.ShortStorage", "torch.cuda.ShortTensor", "torch.cuda.sparse.BFloat16Tensor",
    "torch.cuda.sparse.ByteTensor", "torch.cuda.sparse.CharTensor", "torch.cuda.sparse.DoubleTensor",
    "torch.cuda.sparse.FloatTensor", "torch.cuda.sparse.HalfTensor", "torch.cuda.sparse.IntTensor",
    "torch.cuda.sparse.LongTensor", "torch.cuda.sparse.ShortTensor", "torch.device", "torch.float16",
    "torch.float32", "torch.float64", "torch.float8_e4m3fn", "torch.float8_e4m3fnuz",
    "torch.float8_e5m2", "torch.float8_e5m2fnuz", "torch.int16", "torch.int32", "torch.int64",
    "torch.int8", "torch.nn.parameter.Parameter", "torch.per_channel_affine",
    "torch.per_channel_affine_float_qparams", "torch.per_channel_symmetric", "torch.per_tensor_affine",
    "torch.per_tensor_symmetric", "torch.qint32", "torch.qint8", "torch.quint2x4", "torch.quint4x2",
    "torch.quint8", "torch.serialization._get_layout", "torch.sparse.BFloat16Tensor",
    "torch.sparse.ByteTensor", "torch.sparse.CharTensor", "torch.sparse.DoubleTensor",
    "torch.sparse.FloatTensor", "torch.sparse.HalfTensor", "torch.sparse.IntTensor",
    "torch.sparse.LongTensor", "torch.sparse.ShortTensor", "torch.storage.TypedStorage",
    "torch.storage.UntypedStorage", "torch.uint16", "torch.uint32", "torch.uint64", "torch.uint8",
};

// The names of k_weights_only that torch 1.13.1's list lacks (printed from both, key by key).
constexpr std::string_view k_weights_only_2_6_only[] = {
    "_codecs.encode", "builtins.bytearray", "builtins.complex", "builtins.set", "collections.Counter",
    "torch._tensor._rebuild_from_type_v2", "torch._utils._rebuild_device_tensor_from_cpu_tensor",
    "torch._utils._rebuild_device_tensor_from_numpy", "torch._utils._rebuild_nested_tensor",
    "torch._utils._rebuild_parameter_with_state", "torch._utils._rebuild_qtensor", "torch._utils._rebuild_tensor_v3",
    "torch._utils._rebuild_wrapper_subclass", "torch.bfloat16", "torch.bits16", "torch.bits1x8", "torch.bits2x4",
    "torch.bits4x2", "torch.bits8", "torch.bool", "torch.device", "torch.float8_e4m3fn", "torch.float8_e4m3fnuz",
    "torch.float8_e5m2", "torch.float8_e5m2fnuz", "torch.per_channel_affine", "torch.per_channel_affine_float_qparams",
    "torch.per_channel_symmetric", "torch.per_tensor_affine", "torch.per_tensor_symmetric", "torch.qint32", "torch.qint8",
    "torch.quint2x4", "torch.quint4x2", "torch.quint8", "torch.uint16", "torch.uint32", "torch.uint64", "torch.uint8",
};

// torch 2.6's weights-only loader names these and accepts them once their module is imported
// (nested jagged tensors, dynamic-shape marks, DTensors).
constexpr Entry k_when_imported[] = {
    {"torch._dynamo.decorators._DimRange", "a dataclass of three ints (dim, min, max) that torch.compile's dynamic shapes keep"},
    {"torch.distributed.device_mesh.DeviceMesh", "a DTensor's device mesh: a device type and a tensor of ranks"},
    {"torch.distributed.tensor.DTensor", "a distributed tensor: a local tensor and its spec"},
    {"torch.distributed.tensor._dtensor_spec.DTensorSpec", "a DTensor's mesh, placements and tensor metadata"},
    {"torch.distributed.tensor._dtensor_spec.TensorMeta", "a DTensor's shape, stride and dtype"},
    {"torch.distributed.tensor.placement_types.Partial", "a DTensor placement (a reduce op name)"},
    {"torch.distributed.tensor.placement_types.Replicate", "a DTensor placement"},
    {"torch.distributed.tensor.placement_types.Shard", "a DTensor placement (a dim)"},
    {"torch.nested._internal.nested_tensor.NestedTensor", "a nested jagged tensor's class"},
    {"torch.nested._internal.nested_tensor._rebuild_njt", "rebuilds a nested jagged tensor from its values and offsets"},
};

// Data-only names beyond torch's list that real checkpoints carry. Each is rebuilt by a real
// unpickler from plain values (a class and a state dict, or raw bytes) and runs no code that the
// pickle chooses; what it is called with is judged on its own.
constexpr Entry k_reviewed[] = {
    // Python's data types and pure functions of their arguments.
    {"builtins.Ellipsis", "a constant"},
    {"builtins.NotImplemented", "a constant"},
    {"builtins.abs", "a pure function of its argument"},
    {"builtins.all", "a pure function of its argument"},
    {"builtins.any", "a pure function of its argument"},
    {"builtins.ascii", "a pure function of its argument"},
    {"builtins.bin", "a pure function of its argument"},
    {"builtins.bool", "a data type"},
    {"builtins.bytes", "a data type"},
    {"builtins.callable", "a pure function of its argument"},
    {"builtins.chr", "a pure function of its argument"},
    {"builtins.dict", "a data type"},
    {"builtins.divmod", "a pure function of its arguments"},
    {"builtins.enumerate", "an iterator over its argument"},
    {"builtins.filter", "an iterator over its argument (the function it takes is judged on its own)"},
    {"builtins.float", "a data type"},
    {"builtins.frozenset", "a data type"},
    {"builtins.hash", "a pure function of its argument"},
    {"builtins.hex", "a pure function of its argument"},
    {"builtins.int", "a data type"},
    {"builtins.isinstance", "a pure function of its arguments"},
    {"builtins.issubclass", "a pure function of its arguments"},
    {"builtins.iter", "an iterator over its argument"},
    {"builtins.len", "a pure function of its argument"},
    {"builtins.list", "a data type"},
    {"builtins.map", "an iterator over its argument (the function it takes is judged on its own)"},
    {"builtins.max", "a pure function of its arguments"},
    {"builtins.min", "a pure function of its arguments"},
    {"builtins.next", "steps an iterator made of judged values"},
    {"builtins.object", "the base class (copyreg._reconstructor's base for plain classes)"},
    {"builtins.oct", "a pure function of its argument"},
    {"builtins.ord", "a pure function of its argument"},
    {"builtins.range", "a data type"},
    {"builtins.repr", "a pure function of its argument"},
    {"builtins.reversed", "an iterator over its argument"},
    {"builtins.round", "a pure function of its arguments"},
    {"builtins.slice", "a data type"},
    {"builtins.sorted", "a pure function of its arguments"},
    {"builtins.str", "a data type"},
    {"builtins.sum", "a pure function of its arguments"},
    {"builtins.tuple", "a data type"},
    {"builtins.zip", "an iterator over its arguments"},
    {"collections.ChainMap", "a mapping of mappings"},
    {"collections.UserDict", "a dict wrapper"},
    {"collections.UserList", "a list wrapper"},
    {"collections.UserString", "a str wrapper"},
    {"collections.defaultdict", "a dict; its default factory is judged on its own and called only on a missing key later"},
    {"collections.deque", "a list-like container"},
    {"copyreg.__newobj__", "cls.__new__(cls, *args), what NEWOBJ does: the class is judged on its own"},
    {"copyreg.__newobj_ex__", "cls.__new__(cls, *args, **kwargs): the class is judged on its own"},
    {"copyreg._reconstructor", "protocol 0/1 object creation: base.__new__(cls) and the base's __init__; both classes are judged on their own"},
    {"datetime.date", "a date"},
    {"datetime.datetime", "a timestamp"},
    {"datetime.time", "a time of day"},
    {"datetime.timedelta", "a duration"},
    {"datetime.timezone", "a fixed UTC offset"},
    {"decimal.Decimal", "a decimal number"},
    {"fractions.Fraction", "a rational number"},
    {"operator.getitem", "obj[key] on judged values (how a typing alias such as List[int] pickles)"},
    {"pathlib.Path", "a path as text; making one touches no file"},
    {"pathlib.PosixPath", "a path as text; making one touches no file"},
    {"pathlib.PurePath", "a path as text"},
    {"pathlib.PurePosixPath", "a path as text"},
    {"pathlib.PureWindowsPath", "a path as text"},
    {"pathlib.WindowsPath", "a path as text; making one touches no file"},
    {"pathlib._local.Path", "Python 3.13's home of pathlib's classes: a path as text"},
    {"pathlib._local.PosixPath", "Python 3.13's home of pathlib's classes: a path as text"},
    {"pathlib._local.PurePath", "Python 3.13's home of pathlib's classes: a path as text"},
    {"pathlib._local.PurePosixPath", "Python 3.13's home of pathlib's classes: a path as text"},
    {"pathlib._local.PureWindowsPath", "Python 3.13's home of pathlib's classes: a path as text"},
    {"pathlib._local.WindowsPath", "Python 3.13's home of pathlib's classes: a path as text"},
    {"re._compile", "a compiled regular expression (pattern and flags)"},
    {"types.SimpleNamespace", "attributes from a dict"},
    {"uuid.UUID", "a 128-bit number"},
    {"argparse.Namespace", "parse_args()'s result: attributes from a dict (most training scripts save it as args)"},
    {"enum.Enum", "the enum base class"},
    {"array.array", "a typed array of numbers"},
    {"array._array_reconstructor", "rebuilds an array.array from its type code and bytes"},
    // numpy: arrays, dtypes, scalars and random states, rebuilt from bytes and shapes.
    {"numpy.core.multiarray._reconstruct", "ndarray.__new__: an empty numpy array that BUILD fills from bytes"},
    {"numpy.core.multiarray.scalar", "a numpy scalar from its dtype and bytes (np.float64 losses, metrics)"},
    {"numpy.core.numeric._frombuffer", "a numpy array from bytes (protocol 5)"},
    {"numpy._core.multiarray._reconstruct", "numpy 2: ndarray.__new__, filled from bytes by BUILD"},
    {"numpy._core.multiarray.scalar", "numpy 2: a numpy scalar from its dtype and bytes"},
    {"numpy._core.numeric._frombuffer", "numpy 2: a numpy array from bytes"},
    {"numpy.dtype", "a numpy dtype from its code ('f8')"},
    {"numpy.ndarray", "the numpy array class"},
    {"numpy.ma.core.MaskedArray", "a numpy masked array"},
    {"numpy.ma.core._mareconstruct", "rebuilds a numpy masked array from shapes and dtypes"},
    {"numpy.random._pickle.__bit_generator_ctor", "a numpy bit generator by name from numpy's own table"},
    {"numpy.random._pickle.__generator_ctor", "a numpy Generator around a bit generator"},
    {"numpy.random._pickle.__randomstate_ctor", "a numpy RandomState by bit generator name"},
    {"numpy.random._mt19937.MT19937", "a numpy bit generator (its state is numbers)"},
    {"numpy.random._pcg64.PCG64", "a numpy bit generator (its state is numbers)"},
    {"numpy.random._pcg64.PCG64DXSM", "a numpy bit generator (its state is numbers)"},
    {"numpy.random._philox.Philox", "a numpy bit generator (its state is numbers)"},
    {"numpy.random._sfc64.SFC64", "a numpy bit generator (its state is numbers)"},
    {"numpy.random._generator.Generator", "a numpy random Generator"},
    {"numpy.random.mtrand.RandomState", "a numpy RandomState (its state is numbers)"},
    // Distributed training's checkpoints: DeepSpeed's and torch.distributed.checkpoint's data classes
    // (dataclasses and enums, rebuilt from their fields; DIST-FORMATS.md).
    {"deepspeed.runtime.fp16.loss_scaler.LossScaler", "DeepSpeed's static loss scaler: its attributes are numbers"},
    {"deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler", "DeepSpeed's dynamic loss scaler: its attributes are numbers"},
    {"deepspeed.runtime.zero.config.ZeroStageEnum", "DeepSpeed's ZeRO stage: an int enum"},
    {"deepspeed.utils.tensor_fragment.fragment_address", "DeepSpeed: a parameter's (numel, start) in its flat partition"},
    {"torch.distributed.checkpoint.metadata.Metadata", "DCP's .metadata: dicts of the items below"},
    {"torch.distributed.checkpoint.metadata.TensorStorageMetadata", "DCP: a tensor's properties, size and chunks"},
    {"torch.distributed.checkpoint.metadata.BytesStorageMetadata", "DCP: marks an entry stored as bytes (no fields)"},
    {"torch.distributed.checkpoint.metadata.ChunkStorageMetadata", "DCP: a chunk's offsets and sizes"},
    {"torch.distributed.checkpoint.metadata.MetadataIndex", "DCP: an item's key, offsets and index"},
    {"torch.distributed.checkpoint.metadata.TensorProperties", "DCP: dtype, layout and flags of a tensor"},
    {"torch.distributed.checkpoint.metadata.StorageMeta", "DCP (torch 2.4+): checkpoint and save ids"},
    {"torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING", "DCP: the memory format as an int enum"},
    {"torch.distributed.checkpoint.filesystem._StorageInfo", "DCP: an item's file, offset and length"},
    {"torch.distributed._shard.sharded_tensor.metadata.TensorProperties", "DCP (torch 2.0–2.2): dtype, layout and flags of a tensor"},
    {"torch.distributed._shard.sharded_tensor.metadata.MEM_FORMAT_ENCODING", "DCP (torch 2.0–2.2): the memory format as an int enum"},
    {"torch.distributed._shard.metadata.ShardMetadata", "a ShardedTensor shard's offsets, sizes and placement (text)"},
    {"torch.distributed.checkpoint.planner.LoadItemType", "DCP: how an item is loaded, an enum"},
    {"torch.distributed.checkpoint.planner.LoadPlan", "DCP: a rank's read items (a dataclass of the items below)"},
    {"torch.distributed.checkpoint.planner.ReadItem", "DCP: an item to read, its offsets and lengths"},
    {"torch.distributed.checkpoint.planner.SavePlan", "DCP: a rank's write items (Megatron keeps them in .metadata)"},
    {"torch.distributed.checkpoint.planner.TensorWriteData", "DCP: a chunk's offsets, sizes and properties"},
    {"torch.distributed.checkpoint.planner.WriteItem", "DCP: an item to write, its index and type"},
    {"torch.distributed.checkpoint.planner.WriteItemType", "DCP: tensor, shard or bytes, an enum"},
    // Megatron-LM and TransformerEngine: enums in `args` and FP8 recipes in `_extra_state`.
    {"megatron.core.enums.Fp4Recipe", "Megatron: an FP4 recipe name, a str enum"},
    {"megatron.core.enums.Fp8Recipe", "Megatron: an FP8 recipe name, a str enum"},
    {"megatron.core.enums.ModelType", "Megatron: the model type in args, an enum"},
    {"megatron.core.extensions.transformer_engine.TEDelayedScaling", "Megatron's TransformerEngine FP8 recipe: a dataclass of numbers and names"},
    {"megatron.core.transformer.enums.AttnBackend", "Megatron: the attention backend in args, an enum"},
    {"megatron.core.transformer.enums.AttnMaskType", "Megatron: an attention mask type, an enum"},
    {"megatron.core.transformer.enums.AttnType", "Megatron: an attention type, an enum"},
    {"megatron.core.transformer.enums.CudaGraphModule", "Megatron: a CUDA graph module kind, an enum"},
    {"megatron.core.transformer.enums.CudaGraphScope", "Megatron: a CUDA graph scope, an enum"},
    {"megatron.core.transformer.enums.InferenceCudaGraphScope", "Megatron: a CUDA graph scope, an enum"},
    {"megatron.core.transformer.enums.LayerType", "Megatron: a layer type, an enum"},
    {"megatron.core.transformer.enums.ModelType", "Megatron: the model type, an enum"},
    {"signal.Signals", "an enum of signal numbers (Megatron's args.exit_signal): a value, no signal is sent"},
    {"transformer_engine.common.recipe.DelayedScaling", "TransformerEngine's FP8 recipe: a dataclass of numbers and names"},
    {"transformer_engine.common.recipe.Float8BlockScaling", "TransformerEngine's FP8 recipe: a dataclass of numbers and names"},
    {"transformer_engine.common.recipe.Float8CurrentScaling", "TransformerEngine's FP8 recipe: a dataclass of numbers and names"},
    {"transformer_engine.common.recipe.Format", "TransformerEngine: an FP8 format, an enum"},
    {"transformer_engine.common.recipe.MMParams", "TransformerEngine: a recipe's GEMM settings (flags)"},
    {"transformer_engine.common.recipe.MXFP8BlockScaling", "TransformerEngine's FP8 recipe: a dataclass of numbers and names"},
    {"transformer_engine.common.recipe.NVFP4BlockScaling", "TransformerEngine's FP4 recipe: a dataclass of numbers and names"},
    {"transformer_engine.common.recipe.QParams", "TransformerEngine: a recipe's quantization settings (flags)"},
    {"transformer_engine.common.recipe._FormatHelper", "TransformerEngine: an FP8 format's two maxima, a named tuple"},
    // joblib's array wrapper: joblib.load reads the array after it (an object array's pickle is scanned).
    {"joblib.numpy_pickle.NumpyArrayWrapper", "joblib's array wrapper: the array's bytes follow it in the stream (an object array's pickle is scanned too)"},
    {"io.BytesIO", "an in-memory buffer made from bytes (no file); what a loader is handed from it is scanned"},
    // torch data that its weights-only list leaves out.
    {"torch.channels_last", "a memory format constant"},
    {"torch.channels_last_3d", "a memory format constant"},
    {"torch.contiguous_format", "a memory format constant"},
    {"torch.dtype", "the dtype class"},
    {"torch.layout", "the layout class"},
    {"torch.preserve_format", "a memory format constant"},
    {"torch.sparse_bsc", "a layout constant"},
    {"torch.sparse_bsr", "a layout constant"},
    {"torch.sparse_coo", "a layout constant"},
    {"torch.sparse_csc", "a layout constant"},
    {"torch.sparse_csr", "a layout constant"},
    {"torch.strided", "a layout constant"},
    {"torch.torch_version.TorchVersion", "torch.__version__: a str"},
    {"torch.OrderedDict", "collections.OrderedDict as torch's namespace holds it"},
    {"torch._tensor._rebuild_from_type", "torch < 1.12's tensor-subclass rebuild: the function and type it takes are judged on their own"},
    // TorchScript's pickles (torch.jit.save): list builders that return their argument.
    {"torch.jit._pickle.build_boollist", "TorchScript: returns the list it is given"},
    {"torch.jit._pickle.build_doublelist", "TorchScript: returns the list it is given"},
    {"torch.jit._pickle.build_intlist", "TorchScript: returns the list it is given"},
    {"torch.jit._pickle.build_tensor_from_id", "TorchScript: a tensor of the archive by its index"},
    {"torch.jit._pickle.build_tensorlist", "TorchScript: returns the list it is given"},
    {"torch.jit._pickle.restore_type_tag", "TorchScript: returns the value it is given"},
    // Configuration containers of training frameworks (Lightning's hparams, Hydra's configs).
    {"lightning.fabric.utilities.data.AttributeDict", "Lightning's hparams: a dict with attribute access"},
    {"lightning_fabric.utilities.data.AttributeDict", "Lightning's hparams: a dict with attribute access"},
    {"pytorch_lightning.utilities.parsing.AttributeDict", "Lightning's hparams: a dict with attribute access"},
    {"omegaconf.base.ContainerMetadata", "omegaconf's container metadata (types and flags)"},
    {"omegaconf.base.Metadata", "omegaconf's node metadata (types and flags)"},
    {"omegaconf.dictconfig.DictConfig", "a Hydra/omegaconf config: a dict of nodes (interpolations resolve on access, not at load)"},
    {"omegaconf.listconfig.ListConfig", "a Hydra/omegaconf config list"},
    {"omegaconf.nodes.AnyNode", "an omegaconf value node"},
    {"omegaconf.nodes.BooleanNode", "an omegaconf value node"},
    {"omegaconf.nodes.BytesNode", "an omegaconf value node"},
    {"omegaconf.nodes.EnumNode", "an omegaconf value node"},
    {"omegaconf.nodes.FloatNode", "an omegaconf value node"},
    {"omegaconf.nodes.IntegerNode", "an omegaconf value node"},
    {"omegaconf.nodes.PathNode", "an omegaconf value node"},
    {"omegaconf.nodes.StringNode", "an omegaconf value node"},
    // Type annotations that configs carry (omegaconf keeps typing.Any as each node's type).
    {"typing.Any", "a type annotation"},
    {"typing.Callable", "a type annotation"},
    {"typing.Dict", "a type annotation"},
    {"typing.FrozenSet", "a type annotation"},
    {"typing.List", "a type annotation"},
    {"typing.Literal", "a type annotation"},
    {"typing.Mapping", "a type annotation"},
    {"typing.Optional", "a type annotation"},
    {"typing.Sequence", "a type annotation"},
    {"typing.Set", "a type annotation"},
    {"typing.Tuple", "a type annotation"},
    {"typing.Type", "a type annotation"},
    {"typing.Union", "a type annotation"},
};

// What runs code or reaches the system, by dotted prefix. Groups share the reason reports give.
struct Group {
    std::string_view why;
    std::initializer_list<std::string_view> names;
};
const Group k_denied[] = {
    {"runs programs or shell commands",
     {"os", "subprocess", "pty", "commands", "popen2", "_posixsubprocess", "_winapi", "msvcrt", "pipes", "platform",
      "_aix_support", "_osx_support", "_pyrepl", "uuid", "webbrowser", "multiprocessing", "concurrent", "asyncio",
      "pydoc", "ctypes", "_ctypes", "cffi", "sh", "plumbum", "pexpect", "ptyprocess",
      "invoke", "fabric", "docker", "psutil", "distutils", "setuptools", "pkg_resources", "pip", "ensurepip", "venv",
      "virtualenv", "conda", "git", "pygit2", "torch.utils.cpp_extension", "torch._inductor", "torch.utils.collect_env",
      "torch.utils.bottleneck", "numpy.distutils", "numpy.f2py"}},
    {"runs Python code from text, code objects or other pickles",
     {"builtins.eval", "builtins.exec", "builtins.execfile", "builtins.compile", "builtins.apply", "builtins.breakpoint",
      "builtins.input", "builtins.help", "runpy", "code", "codeop", "bdb", "pdb", "profile", "cProfile", "trace",
      "timeit", "doctest", "idlelib", "lib2to3", "test", "types", "marshal", "pickle", "_pickle", "cPickle", "shelve",
      "copyreg.add_extension", "copy_reg.add_extension", "dill", "cloudpickle", "joblib", "IPython", "ipykernel",
      "jupyter_client", "jinja2", "mako", "numexpr", "asteval", "numba", "Cython", "pyximport", "sympy.sympify",
      "sympy.parsing", "sympy.core.sympify", "sympy.utilities.lambdify", "_interpreters", "_xxsubinterpreters",
      "pandas.eval", "pandas.read_pickle", "pandas.io", "yaml.load", "yaml.load_all",
      "yaml.unsafe_load", "yaml.unsafe_load_all", "yaml.full_load", "yaml.full_load_all", "tensorflow", "keras",
      "logging.config", "torch.load", "torch.save", "torch.serialization", "torch.hub", "torch.jit", "torch.package",
      "torch._dynamo", "torch.fx", "torch.utils", "torch._C", "torch.ops", "torch.library", "torch.compile",
      "torch.storage._load_from_bytes", "torch.multiprocessing", "numpy.load", "numpy.loads", "numpy.testing",
      "numpy.lib.npyio", "numpy.ctypeslib"}},
    {"imports or resolves any name, or builds callables that run what they are given",
     {"builtins.__import__", "builtins.getattr", "builtins.setattr", "builtins.delattr", "builtins.globals",
      "builtins.locals", "builtins.vars", "builtins.type", "builtins.reload", "importlib", "imp", "_imp",
      "zipimport", "pkgutil", "modulefinder", "site", "unittest.mock", "importlib_metadata", "functools.partial",
      "functools.partialmethod",
      "functools.reduce", "operator.attrgetter", "operator.itemgetter", "operator.methodcaller", "operator.call",
      "inspect"}},
    {"opens, writes or deletes files",
     {"builtins.open", "builtins.file", "io", "shutil", "tempfile", "glob", "fileinput", "linecache",
      "tarfile",
      "zipfile", "gzip", "bz2", "lzma", "dbm", "sqlite3", "mailbox", "mmap", "netrc", "logging.FileHandler",
      "logging.handlers", "logging.basicConfig", "codecs.open", "fsspec", "smart_open", "s3fs", "gcsfs", "h5py"}},
    {"opens network connections",
     {"socket", "_socket", "ssl", "_ssl", "select", "selectors", "http", "httplib", "urllib", "urllib2", "ftplib",
      "smtplib", "telnetlib", "imaplib", "poplib", "nntplib", "xmlrpc", "xmlrpclib", "socketserver", "SocketServer",
      "asyncore", "asynchat", "requests", "aiohttp", "httpx", "urllib3", "httplib2", "pycurl", "paramiko", "boto3",
      "botocore", "websocket", "websockets", "grpc", "zmq", "tornado", "twisted", "dns"}},
    {"writes to the console or to a file it is handed", {"builtins.print"}},
    {"turns off or fools a scanner", {"fickling", "picklescan", "modelscan", "modelaudit", "saferpickle", "model_unpickler"}},
    {"changes the running interpreter or process",
     {"sys", "signal", "threading", "_thread", "thread", "faulthandler", "resource", "gc", "atexit", "fcntl",
      "termios", "tty", "builtins.exit", "builtins.quit", "builtins.__build_class__"}},
};

// The standard library's top-level modules: sys.stdlib_module_names of Python 3.11 and 3.13, the
// Python 2 names pickle's fix_imports maps (Lib/_compat_pickle.py) and modules removed since.
constexpr std::string_view k_stdlib[] = {
    "BaseHTTPServer", "Bastion", "CGIHTTPServer", "ConfigParser", "Cookie", "Dialog",
    "DocXMLRPCServer", "FileDialog", "HTMLParser", "Queue", "ScrolledText", "SimpleDialog",
    "SimpleHTTPServer", "SimpleXMLRPCServer", "SocketServer", "StringIO", "Tix", "Tkconstants",
    "Tkdnd", "Tkinter", "UserDict", "UserList", "UserString", "__builtin__", "__future__",
    "_abc", "_abcoll", "_aix_support", "_android_support", "_apple_support", "_ast", "_asyncio",
    "_bisect", "_blake2", "_bootlocale", "_bootsubprocess", "_bz2", "_codecs", "_codecs_cn",
    "_codecs_hk", "_codecs_iso2022", "_codecs_jp", "_codecs_kr", "_codecs_tw", "_collections",
    "_collections_abc", "_colorize", "_compat_pickle", "_compression", "_contextvars", "_crypt",
    "_csv", "_ctypes", "_curses", "_curses_panel", "_datetime", "_dbm", "_decimal", "_dummy_thread",
    "_elementtree", "_frozen_importlib", "_frozen_importlib_external", "_functools", "_gdbm",
    "_hashlib", "_heapq", "_imp", "_interpchannels", "_interpqueues", "_interpreters", "_io",
    "_ios_support", "_json", "_locale", "_lsprof", "_lzma", "_markupbase", "_md5", "_msi",
    "_multibytecodec", "_multiprocessing", "_opcode", "_opcode_metadata", "_operator", "_osx_support",
    "_overlapped", "_pickle", "_posixshmem", "_posixsubprocess", "_py_abc", "_pydatetime",
    "_pydecimal", "_pyio", "_pylong", "_pyrepl", "_queue", "_random", "_scproxy", "_sha1", "_sha2",
    "_sha256", "_sha3", "_sha512", "_signal", "_sitebuiltins", "_socket", "_sqlite3", "_sre", "_ssl",
    "_stat", "_statistics", "_string", "_strptime", "_struct", "_suggestions", "_symtable",
    "_sysconfig", "_thread", "_threading_local", "_tkinter", "_tokenize", "_tracemalloc", "_typing",
    "_uuid", "_warnings", "_weakref", "_weakrefset", "_winapi", "_winreg", "_wmi", "_zoneinfo", "abc",
    "aifc", "antigravity", "anydbm", "argparse", "array", "ast", "asynchat", "asyncio", "asyncore",
    "atexit", "audiodev", "audioop", "base64", "bdb", "binascii", "binhex", "bisect", "builtins",
    "bz2", "cPickle", "cProfile", "cStringIO", "calendar", "cgi", "cgitb", "chunk", "cmath", "cmd",
    "code", "codecs", "codeop", "collections", "colorsys", "commands", "compileall", "compiler",
    "concurrent", "configparser", "contextlib", "contextvars", "cookielib", "copy", "copy_reg",
    "copyreg", "crypt", "csv", "ctypes", "curses", "dataclasses", "datetime", "dbhash", "dbm",
    "decimal", "difflib", "dircache", "dis", "distutils", "dl", "doctest", "dumbdbm", "dummy_thread",
    "dummy_threading", "email", "encodings", "ensurepip", "enum", "errno", "exceptions",
    "faulthandler", "fcntl", "filecmp", "fileinput", "fnmatch", "formatter", "fpformat", "fractions",
    "ftplib", "functools", "gc", "gdbm", "genericpath", "getopt", "getpass", "gettext", "glob",
    "graphlib", "grp", "gzip", "hashlib", "heapq", "hmac", "html", "htmlentitydefs", "htmllib", "http",
    "httplib", "idlelib", "ihooks", "imageop", "imaplib", "imghdr", "imp", "importlib", "imputil",
    "inspect", "io", "ipaddress", "itertools", "json", "keyword", "lib2to3", "linecache", "locale",
    "logging", "lzma", "macpath", "macurl2path", "mailbox", "mailcap", "markupbase", "marshal", "math",
    "md5", "mhlib", "mimetools", "mimetypes", "mimify", "mmap", "modulefinder", "msilib", "msvcrt",
    "multifile", "multiprocessing", "mutex", "netrc", "new", "nis", "nntplib", "nt", "ntpath",
    "nturl2path", "numbers", "opcode", "operator", "optparse", "os", "ossaudiodev", "parser",
    "pathlib", "pdb", "pickle", "pickletools", "pipes", "pkgutil", "platform", "plistlib", "popen2",
    "poplib", "posix", "posixfile", "posixpath", "pprint", "profile", "pstats", "pty", "pwd",
    "py_compile", "pyclbr", "pydoc", "pydoc_data", "pyexpat", "queue", "quopri", "random", "re",
    "readline", "repr", "reprlib", "resource", "rexec", "rfc822", "rlcompleter", "robotparser",
    "runpy", "sched", "secrets", "select", "selectors", "sets", "sgmllib", "sha", "shelve", "shlex",
    "shutil", "signal", "site", "smtpd", "smtplib", "sndhdr", "socket", "socketserver", "spwd",
    "sqlite3", "sre_compile", "sre_constants", "sre_parse", "ssl", "stat", "statistics", "statvfs",
    "string", "stringprep", "struct", "subprocess", "sunau", "sunaudio", "symbol", "symtable", "sys",
    "sysconfig", "syslog", "tabnanny", "tarfile", "telnetlib", "tempfile", "termios", "test",
    "textwrap", "this", "thread", "threading", "time", "timeit", "tkColorChooser", "tkCommonDialog",
    "tkFileDialog", "tkFont", "tkMessageBox", "tkSimpleDialog", "tkinter", "toaiff", "token",
    "tokenize", "tomllib", "trace", "traceback", "tracemalloc", "ttk", "tty", "turtle", "turtledemo",
    "types", "typing", "unicodedata", "unittest", "urllib", "urllib2", "urlparse", "user", "uu",
    "uuid", "venv", "warnings", "wave", "weakref", "webbrowser", "whichdb", "winreg", "winsound",
    "wsgiref", "xdrlib", "xml", "xmlrpc", "xmlrpclib", "zipapp", "zipfile", "zipimport", "zlib",
    "zoneinfo",
};

// Frameworks whose modules are gadget collections outside their data classes.
constexpr std::string_view k_frameworks[] = {"numpy", "torch"};

// An attribute walk that reaches one of these reaches the system (`pathlib.os.system`), or a name
// that runs code wherever a module keeps it.
constexpr std::string_view k_dangerous_attributes[] = {
    "Popen", "__builtin__", "builtins", "check_call", "check_output", "commands", "compile", "ctypes", "eval",
    "exec", "execfile", "execl", "execle", "execlp", "execv", "execve", "execvp", "fork", "forkpty", "getattr",
    "import_module", "importlib", "load_module", "marshal", "nt", "os", "pickle", "popen", "popen2", "posix",
    "pty", "run_module", "run_path", "runpy", "setattr", "shutil", "socket", "spawnl", "spawnle", "spawnlp",
    "spawnv", "spawnve", "spawnvp", "subprocess", "sys", "system",
};

std::vector<Entry> make_denied() {
    std::vector<Entry> out;
    for (const Group& g : k_denied)
        for (std::string_view n : g.names) out.push_back({n, g.why});
    std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.name < b.name; });
    return out;
}

template <size_t N>
const Entry* find_entry(const Entry (&list)[N], std::string_view full) {
    for (const Entry& e : list)
        if (e.name == full) return &e;
    return nullptr;
}

}  // namespace

bool torch_weights_only(std::string_view full) { return in_sorted(k_weights_only, full); }
bool torch_weights_only_2_6_only(std::string_view full) { return in_sorted(k_weights_only_2_6_only, full); }

const Entry* torch_when_imported(std::string_view full) { return find_entry(k_when_imported, full); }

const Entry* reviewed_data(std::string_view full) { return find_entry(k_reviewed, full); }

const std::vector<Entry>& denied_table() {
    static const std::vector<Entry> table = make_denied();
    return table;
}

const Entry* denied(std::string_view full) {
    const std::vector<Entry>& table = denied_table();
    // Every dotted prefix: `os` answers for `os.path.join`; the longest one that is listed gives the
    // reason (`torch.utils.collect_env` runs commands, the rest of `torch.utils` runs code).
    const Entry* match = nullptr;
    for (size_t dot = 0;; ++dot) {
        dot = full.find('.', dot);
        std::string_view prefix = full.substr(0, dot);
        auto it = std::lower_bound(table.begin(), table.end(), prefix,
                                   [](const Entry& e, std::string_view n) { return e.name < n; });
        if (it != table.end() && it->name == prefix) match = &*it;
        if (dot == std::string_view::npos) return match;
    }
}

bool stdlib_module(std::string_view root) { return in_sorted(k_stdlib, root); }

bool framework_module(std::string_view root) { return in_sorted(k_frameworks, root); }

bool dangerous_attribute(std::string_view part) { return in_sorted(k_dangerous_attributes, part); }

const char* check_lists() {
    auto sorted = [](const auto& list) { return std::is_sorted(std::begin(list), std::end(list)); };
    if (!sorted(k_weights_only)) return "k_weights_only is not sorted";
    if (!sorted(k_weights_only_2_6_only)) return "k_weights_only_2_6_only is not sorted";
    for (std::string_view n : k_weights_only_2_6_only)
        if (!torch_weights_only(n)) return "a name of torch 2.6's list only is not on torch's list";
    if (!sorted(k_stdlib)) return "k_stdlib is not sorted";
    if (!sorted(k_frameworks)) return "k_frameworks is not sorted";
    if (!sorted(k_dangerous_attributes)) return "k_dangerous_attributes is not sorted";
    const std::vector<Entry>& d = denied_table();
    for (size_t i = 1; i < d.size(); ++i)
        if (d[i - 1].name == d[i].name) return "a name is denied twice";
    for (const Entry& e : k_reviewed)
        if (torch_weights_only(e.name)) return "a reviewed name is on torch's list already";
    return nullptr;
}

}  // namespace ckpt::global_lists
