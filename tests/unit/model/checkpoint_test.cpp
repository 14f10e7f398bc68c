#include <catch2/catch.hpp>

#include <sstream>

#include "ckpt/checkpoint.hpp"
#include "ckpt/error.hpp"
#include "ckpt/inspect.hpp"
#include "pickle/pickle.hpp"
#include "support/builders.hpp"

using namespace ckpt;
using testing::PickleBuilder;

namespace {

std::string floats(size_t n) { return std::string(n * 4, '\0'); }

// {"model": OrderedDict{"w": T(2x3 of storage 0), "b": T(3 of storage 1), "wt": w transposed}, "epoch": 3}
std::string training_pickle() {
    PickleBuilder p;
    p.proto(2).empty_dict().mark();
    p.str("model").global("collections", "OrderedDict").empty_tuple().reduce().mark();
    p.str("module.w").tensor("FloatStorage", "0", 6, 0, {2, 3}, {3, 1}).binput(10);
    p.str("module.b").tensor("FloatStorage", "1", 3, 0, {3}, {1});
    p.str("module.wt").tensor("FloatStorage", "0", 6, 0, {3, 2}, {1, 3});
    p.setitems();
    p.str("epoch").integer(3);
    p.str("alias").binget(10);
    p.setitems().stop();
    return p.bytes();
}

std::unique_ptr<Checkpoint> open_bytes(const std::string& name, const std::string& bytes,
                                       OpenOptions options = {}) {
    std::string dir = testing::scratch_dir("checkpoint_test");
    std::string path = dir + "/" + name;
    testing::write_file(path, bytes);
    return Checkpoint::open(path, options);
}

// The last entry, at `at`: "shape_of_a", the memoized size tuple (300,) fetched again after the
// rebuilds that read it gave their arguments back.
void check_memoized_size(const Checkpoint& c, size_t at) {
    REQUIRE(c.entries().size() == at + 1);
    CHECK(c.entries()[at].key == "shape_of_a");
    const Value* shape = c.entries()[at].value;
    REQUIRE(shape->kind == ValueKind::tuple);
    REQUIRE(shape->items().size() == 1);
    CHECK(shape->items()[0]->kind == ValueKind::integer);
    CHECK(shape->items()[0]->i() == 300);
}

// Opened with a trace: every persistent id it recorded is still what its ('storage', class, key, …)
// tuple said, in order, though the rebuilds around it gave their values back (the tuples too).
void check_traced_storages(const Checkpoint& c, const std::vector<std::string>& keys) {
    REQUIRE(c.pickle_trace());
    const auto& ids = c.pickle_trace()->persistent_ids;
    REQUIRE(ids.size() == keys.size());
    for (size_t n = 0; n < ids.size(); ++n) {
        CHECK(ids[n].first == "storage");
        REQUIRE(ids[n].cls->kind == ValueKind::global);
        CHECK(global_name(ids[n].cls) == "torch.FloatStorage");
        CHECK(ids[n].has_key);
        CHECK(ids[n].key == keys[n]);
    }
}

}  // namespace

TEST_CASE("checkpoint: keys, tensors, storages and the state dict of a training checkpoint") {
    auto c = open_bytes("train.pth", testing::torch_zip("train", training_pickle(),
                                                        {{"0", floats(6)}, {"1", floats(3)}}));
    CHECK(c->zip_root() == "train");
    CHECK(c->version() == "3");
    REQUIRE(c->storages().size() == 2);
    CHECK(c->storages()[0].record == "train/data/0");
    CHECK(c->storages()[0].record_size == 24);

    std::vector<std::string> keys;
    for (const auto& e : c->entries()) keys.push_back(std::string(e.key));
    CHECK(keys == std::vector<std::string>{"model.module.w", "model.module.b", "model.module.wt", "epoch", "alias"});

    const StateDict& sd = c->state_dict();
    CHECK(sd.kind == StateDictKind::dict);
    CHECK(sd.path == "model");
    REQUIRE(sd.entries.size() == 3);
    CHECK(sd.entries[0].name == "module.w");

    const TensorInfo& wt = c->tensors()[*c->entries()[2].tensor];
    CHECK(wt.shape == std::vector<int64_t>{3, 2});
    CHECK(wt.stride == std::vector<int64_t>{1, 3});
    CHECK_FALSE(wt.contiguous());
    CHECK(wt.extent == 6);
    CHECK(c->problems().empty());

    // The same tensor object at two keys ("alias") is one user of its storage, w and wt are two.
    auto users = c->storage_users();
    CHECK(users[0] == 2);
    CHECK(users[1] == 1);

    InspectReport r = inspect(*c, {});
    REQUIRE(r.hints.size() == 1);
    CHECK(r.hints[0].kind == "wrapper_prefix");
    CHECK(r.hints[0].command.find("--state-dict-key model") != std::string::npos);
    CHECK(r.state_dict_totals.tensors == 3);
    CHECK(r.all_totals.tensors == 3);  // "alias" is the same object as model.module.w
}

TEST_CASE("checkpoint: a tensor's size tuple fetched again from the memo survives the recycling of its arguments") {
    // The pickle memoizes a's size tuple and puts it into the dict again under "shape_of_a": the
    // arguments of a's rebuild go back to the arena, that tuple must not (b's values would reuse it).
    PickleBuilder p;
    p.proto(2).empty_dict().mark().str("a");
    p.global("torch._utils", "_rebuild_tensor_v2").mark().storage("FloatStorage", "0", 300).integer(0);
    p.mark().integer(300).tuple().binput(7).mark().integer(1).tuple().newfalse();
    p.global("collections", "OrderedDict").empty_tuple().reduce().tuple().reduce();
    p.str("b").tensor("FloatStorage", "1", 300, 0, {300}, {1});
    p.str("shape_of_a").binget(7).setitems().stop();
    for (bool trace : {false, true}) {  // a writer's trace recycles too
        OpenOptions o;
        o.trace_pickle = trace;
        auto c = open_bytes("memo.pth", testing::torch_zip("memo", p.bytes(), {{"0", floats(300)}, {"1", floats(300)}}), o);
        check_memoized_size(*c, 2);
        REQUIRE(c->tensors().size() == 2);
        CHECK(c->tensors()[1].shape == std::vector<int64_t>{300});
        CHECK(c->tensors()[1].stride == std::vector<int64_t>{1});
        if (trace) check_traced_storages(*c, {"0", "1"});
    }
}

TEST_CASE("checkpoint: a memoized tuple a torch.Size was made of survives the recycling of the Size's slots") {
    // a's size is torch.Size(T), T memoized and put into the dict again: the rebuild's arguments and
    // their slots go back to the arena; the Size's slots must be its own, or b's tuples would reuse T's.
    PickleBuilder p;
    p.proto(2).empty_dict().mark().str("a");
    p.global("torch._utils", "_rebuild_tensor_v2").mark().storage("FloatStorage", "0", 300).integer(0);
    p.global("torch", "Size").mark().mark().integer(300).tuple().binput(7).tuple().reduce();
    p.mark().integer(1).tuple().newfalse();
    p.global("collections", "OrderedDict").empty_tuple().reduce().tuple().reduce();
    p.str("b").tensor("FloatStorage", "1", 300, 0, {300}, {1});
    p.str("c").tensor("FloatStorage", "2", 300, 0, {300}, {1});
    p.str("shape_of_a").binget(7).setitems().stop();
    for (bool trace : {false, true}) {
        OpenOptions o;
        o.trace_pickle = trace;
        auto c = open_bytes("size.pth", testing::torch_zip("size", p.bytes(), {{"0", floats(300)}, {"1", floats(300)}, {"2", floats(300)}}), o);
        check_memoized_size(*c, 3);
        REQUIRE(c->tensors().size() == 3);
        for (const TensorInfo& t : c->tensors()) {
            CHECK(t.shape == std::vector<int64_t>{300});
            CHECK(t.stride == std::vector<int64_t>{1});
        }
        if (trace) check_traced_storages(*c, {"0", "1", "2"});
    }
}

TEST_CASE("checkpoint: --state-dict-key overrides detection and names bad keys") {
    std::string zip = testing::torch_zip("train", training_pickle(), {{"0", floats(6)}, {"1", floats(3)}});
    OpenOptions o;
    o.state_dict_key = "epoch";
    CHECK_THROWS_WITH(open_bytes("t.pth", zip, o), Catch::Contains("--state-dict-key 'epoch' is a int"));
    o.state_dict_key = "nope";
    CHECK_THROWS_WITH(open_bytes("t.pth", zip, o), Catch::Contains("no such key"));
    o.state_dict_key = "model";
    CHECK(open_bytes("t.pth", zip, o)->state_dict().entries.size() == 3);
}

TEST_CASE("checkpoint: storage problems are collected, and inspect refuses them") {
    SECTION("missing record") {
        auto c = open_bytes("m.pth", testing::torch_zip("m", training_pickle(), {{"0", floats(6)}}));
        REQUIRE(c->problems().size() == 1);
        CHECK(c->problems()[0].kind == "missing_record");
        CHECK_THROWS_WITH(inspect(*c, {}), Catch::Contains("has no record m/data/1"));
    }
    SECTION("record shorter than the storage") {
        auto c = open_bytes("s.pth", testing::torch_zip("s", training_pickle(), {{"0", floats(5)}, {"1", floats(3)}}));
        REQUIRE(c->problems().size() == 1);
        CHECK(c->problems()[0].kind == "record_size");
    }
    SECTION("view past the end of its storage") {
        PickleBuilder p;
        p.proto(2).empty_dict().str("w").tensor("FloatStorage", "0", 4, 2, {3}, {1}).setitem().stop();
        auto c = open_bytes("v.pth", testing::torch_zip("v", p.bytes(), {{"0", floats(4)}}));
        REQUIRE(c->problems().size() == 1);
        CHECK(c->problems()[0].kind == "out_of_bounds");
        CHECK(c->problems()[0].key == "w");
    }
}

TEST_CASE("checkpoint: storages find their records by the key's number or by its name") {
    // torch.save's keys are 0, 1, …: found by number (DecimalIndex), the directory's names not read
    // again. Any other key (leading zeros, text, a number past the records' count) by its name.
    PickleBuilder p;
    p.proto(2).empty_dict();
    const std::vector<std::string> keys = {"1", "0", "007", "w", "99999999", "1", "2"};
    for (size_t i = 0; i < keys.size(); ++i)
        p.str("t" + std::to_string(i)).tensor("FloatStorage", keys[i], 2, 0, {2}, {1}).setitem();
    p.stop();
    // "01" is not key 1's record, "7" not key 007's; key 2 has no record.
    auto c = open_bytes("n.pth", testing::torch_zip("n", p.bytes(),
                                                    {{"01", floats(9)}, {"0", floats(2)}, {"7", floats(9)}, {"1", floats(2)},
                                                     {"007", floats(2)}, {"w", floats(2)}, {"99999999", floats(2)}}));
    REQUIRE(c->storages().size() == 6);  // "1" twice is one storage
    for (size_t i = 0; i < c->storages().size(); ++i) {
        const StorageInfo& s = c->storages()[i];
        INFO(s.key);
        if (s.key == "2") {
            CHECK_FALSE(s.record_present);
            CHECK(s.record == "n/data/2");
            CHECK_FALSE(c->storage_record(i));
            continue;
        }
        CHECK(s.record_present);
        CHECK(s.record == "n/data/" + std::string(s.key));
        CHECK(s.record_size == 8);
        REQUIRE(c->storage_record(i));
        CHECK(c->records()[*c->storage_record(i)].name == s.record);
    }
    REQUIRE(c->problems().size() == 1);
    CHECK(c->problems()[0].kind == "missing_record");
    CHECK(c->tensors()[0].storage == c->tensors()[5].storage);
}

TEST_CASE("inspect: the wrapper hint tells the nesting the keys show, the outermost first") {
    // Each attribute wraps the rest: _orig_mod.module.x is torch.compile(DDP(model)).
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"module.", "saved from a DDP/DataParallel wrapper"},
        {"_orig_mod.", "saved from a torch.compile'd model"},
        {"_orig_mod.module.", "saved from torch.compile(DDP(model)): the model wrapped in DDP/DataParallel, then compiled with torch.compile"},
        {"module._orig_mod.", "saved from DDP(torch.compile(model)): the model compiled with torch.compile, then wrapped in DDP/DataParallel"},
    };
    for (const auto& [prefix, origin] : cases) {
        INFO(prefix);
        PickleBuilder p;
        p.proto(2).empty_dict().mark();
        p.str(prefix + "w").tensor("FloatStorage", "0", 2, 0, {2}, {1});
        p.str(prefix + "b").tensor("FloatStorage", "1", 2, 0, {2}, {1});
        p.setitems().stop();
        auto c = open_bytes("w.pth", testing::torch_zip("w", p.bytes(), {{"0", floats(2)}, {"1", floats(2)}}));
        InspectReport r = inspect(*c, {});
        REQUIRE(r.hints.size() == 1);
        CHECK(r.hints[0].kind == "wrapper_prefix");
        CHECK(r.hints[0].message == "all 2 keys start with \"" + prefix + "\" (" + origin + ")");
    }
}

TEST_CASE("checkpoint: the zip root is whatever the first record says") {
    PickleBuilder p;
    p.proto(2).empty_dict().str("w").tensor("HalfStorage", "0", 2, 0, {2}, {1}).setitem().stop();
    auto c = open_bytes("x.pth", testing::torch_zip("my.model-v2", p.bytes(), {{"0", std::string(4, '\0')}}));
    CHECK(c->zip_root() == "my.model-v2");
    CHECK(dtype_name(c->tensors()[0].dtype) == "float16");
}

TEST_CASE("checkpoint: files that are not torch zips say what they are") {
    CHECK_THROWS_WITH(open_bytes("e.pth", ""), Catch::Contains("empty file"));
    CHECK_THROWS_WITH(open_bytes("t.pth", "hello world, not a checkpoint"), Catch::Contains("not a PyTorch checkpoint"));
    std::string legacy("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.", 15);
    CHECK_THROWS_WITH(open_bytes("l.pth", legacy), Catch::Contains("legacy checkpoint: the file ends before the protocol version"));
    std::string st = std::string("\x02\x00\x00\x00\x00\x00\x00\x00{}", 10);  // safetensors with no tensors
    auto empty = open_bytes("s.safetensors", st);
    CHECK(empty->format() == Format::safetensors);
    CHECK(empty->tensors().empty());
    try {
        open_bytes("t.pth", "garbage");
    } catch (const Error& e) {
        CHECK(e.path().find("t.pth") != std::string::npos);
        CHECK(e.kind() == ErrorKind::format);
    }
}

TEST_CASE("inspect: write_json streams the same text as the document's dump") {
    // Keys that need escaping (quote, backslash, newline, a control byte, non-ASCII), a scalar
    // tensor (empty shape), a key filter, objects and an optimizer-free training checkpoint.
    PickleBuilder p;
    p.proto(2).empty_dict().mark();
    p.str("model").global("collections", "OrderedDict").empty_tuple().reduce().mark();
    p.str("a\"b\\c").tensor("FloatStorage", "0", 6, 0, {2, 3}, {3, 1});
    p.str("line\nbreak\x01").tensor("FloatStorage", "1", 3, 0, {3}, {1});
    p.str("gr\xc3\xb6\xc3\x9f" "e \xe2\x9c\x93").tensor("FloatStorage", "0", 6, 2, {}, {});
    p.str("plain.weight").tensor("FloatStorage", "1", 3, 1, {1, 2}, {2, 1});
    p.str("say \"hi\"").tensor("FloatStorage", "1", 3, 0, {3}, {1});
    p.str("back\\slash").tensor("FloatStorage", "1", 3, 0, {3}, {1});
    p.setitems();
    p.str("epoch").integer(3);
    p.str("note").str("tab\there \"quoted\"");
    p.setitems().stop();
    auto c = open_bytes("escapes.pth", testing::torch_zip("escapes", p.bytes(), {{"0", floats(6)}, {"1", floats(3)}}));
    auto dumped = [](const InspectReport& r) {
        return to_json(r).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    };
    auto streamed = [](const InspectReport& r) {
        std::ostringstream out;
        write_json(r, out);
        return out.str();
    };
    InspectReport all = inspect(*c, {});
    REQUIRE(all.tensors.size() == 6);
    CHECK(streamed(all) == dumped(all));
    InspectOptions some;
    some.key_globs = {"plain.*"};
    InspectReport filtered = inspect(*c, some);
    CHECK(streamed(filtered) == dumped(filtered));
    InspectOptions none;
    none.key_globs = {"nothing"};
    InspectReport empty = inspect(*c, none);
    CHECK(streamed(empty) == dumped(empty));
    CHECK(streamed(empty).find("\"tensors\": []") != std::string::npos);
    // The training checkpoint of the tests above, and a file without tensors at all.
    auto t = open_bytes("train2.pth", testing::torch_zip("train2", training_pickle(), {{"0", floats(6)}, {"1", floats(3)}}));
    InspectReport tr = inspect(*t, {});
    CHECK(streamed(tr) == dumped(tr));
    PickleBuilder q;
    q.proto(2).empty_dict().str("epoch").integer(7).setitem().stop();
    auto n = open_bytes("none.pth", testing::torch_zip("none", q.bytes(), {}));
    InspectReport nr = inspect(*n, {});
    CHECK(streamed(nr) == dumped(nr));
    CHECK(streamed(nr).find("\"storages\": []") != std::string::npos);
}
