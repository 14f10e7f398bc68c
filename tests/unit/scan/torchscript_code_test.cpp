// A TorchScript archive's code/ judged for what runs at load (scan/torchscript_code.hpp). The sources
// are written as torch.jit.save writes them: two-space indents, signatures that break after `self`.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include "ckpt/globals.hpp"
#include "ckpt/scan.hpp"
#include "scan/pickle_scan.hpp"
#include "scan/torchscript_code.hpp"

using namespace ckpt;

namespace {

const char* k_file = "archive/code/__torch__.py";

// A scripted module: forward's body and __setstate__'s body (each line indented 4), then more methods.
std::string module(const std::string& setstate_body, const std::string& forward_body = "    return x\n",
                   const std::string& more = "") {
    return "class M(Module):\n"
           "  __parameters__ = []\n"
           "  __buffers__ = []\n"
           "  training : bool\n"
           "  def forward(self: __torch__.M,\n"
           "    x: Tensor) -> Tensor:\n" +
           forward_body +
           "  def __setstate__(self: __torch__.M,\n"
           "    state: Tuple[Tensor, int]) -> NoneType:\n" +
           setstate_body + "    return None\n" + more;
}

ScanReport judge(const std::string& code) {
    ScanReport r;
    PickleScanner s(r, GlobalPolicy::standard());
    scan_torchscript({{k_file, {reinterpret_cast<const uint8_t*>(code.data()), code.size()}, 1234}}, s);
    return r;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

bool noted(const ScanReport& r, const std::string& part) {
    return std::any_of(r.notes.begin(), r.notes.end(),
                       [&](const ScanNote& n) { return n.kind == "torchscript_code" && contains(n.message, part); });
}

}  // namespace

TEST_CASE("torchscript: torch.save in __setstate__ is a dangerous finding naming aten::save") {
    ScanReport r = judge(module("    _0 = torch.save((state)[0], \"/tmp/owned\")\n"));
    REQUIRE(r.findings.size() == 1);
    const ScanFinding& f = r.findings[0];
    CHECK(f.kind == "torchscript_op");
    CHECK(f.severity == GlobalClass::dangerous);
    CHECK(f.record == k_file);
    CHECK(f.offset == 1234);
    CHECK(contains(f.message, "aten::save"));
    CHECK(contains(f.message, "M.__setstate__"));
    CHECK(contains(f.message, "runs when torch.jit.load restores the archive"));
    // One note lists the methods that run at load.
    CHECK(std::any_of(r.notes.begin(), r.notes.end(), [](const ScanNote& n) {
        return n.kind == "torchscript_code" && contains(n.message, "at load: M.__setstate__");
    }));
}

TEST_CASE("torchscript: ops.aten.from_file in __setstate__ is a dangerous finding") {
    ScanReport r = judge(module("    _0 = ops.aten.from_file(\"/etc/passwd\", True, 4096)\n"));
    REQUIRE(r.findings.size() == 1);
    CHECK(r.findings[0].kind == "torchscript_op");
    CHECK(r.findings[0].severity == GlobalClass::dangerous);
    CHECK(contains(r.findings[0].message, "aten::from_file"));
}

TEST_CASE("torchscript: set_ on a tensor is dangerous in __setstate__ and a note in forward") {
    ScanReport load = judge(module("    _0 = (state)[0].set_(ops.aten.empty([0]))\n"));
    REQUIRE(load.findings.size() == 1);
    CHECK(load.findings[0].severity == GlobalClass::dangerous);
    CHECK(contains(load.findings[0].message, "aten::set_"));
    ScanReport call = judge(module("", "    _0 = (x).set_(ops.aten.empty([0]))\n    return x\n"));
    CHECK(call.findings.empty());
    CHECK(noted(call, "aten::set_"));
    CHECK(noted(call, "runs when the scripted model's method is called"));
}

TEST_CASE("torchscript: what __setstate__ calls runs at load too") {
    std::string helper = "  def helper(self: __torch__.M,\n"
                         "    t: Tensor) -> NoneType:\n"
                         "    _1 = torch.save(t, \"/tmp/owned\")\n"
                         "    return None\n";
    ScanReport r = judge(module("    _0 = self.helper((state)[0])\n", "    return x\n", helper));
    REQUIRE(r.findings.size() == 1);
    CHECK(r.findings[0].severity == GlobalClass::dangerous);
    CHECK(contains(r.findings[0].message, "M.helper"));
    CHECK(contains(r.findings[0].message, "aten::save"));
    CHECK(contains(r.findings[0].message, "runs when torch.jit.load restores the archive"));
}

TEST_CASE("torchscript: an operator of a custom namespace in __setstate__ is an unknown finding") {
    ScanReport r = judge(module("    _0 = ops.myns.run((state)[0])\n"));
    REQUIRE(r.findings.size() == 1);
    CHECK(r.findings[0].kind == "torchscript_op");
    CHECK(r.findings[0].severity == GlobalClass::unknown);
    CHECK(contains(r.findings[0].message, "myns::run"));
}

TEST_CASE("torchscript: quantized prepacking in __setstate__ is what quantized modules do: no finding") {
    ScanReport r = judge(module("    _0 = ops.quantized.conv2d_prepack((state)[0], None, [1, 1], [0, 0], [1, 1], 1)\n"
                                "    self._packed_params = _0\n"));
    CHECK(r.findings.empty());
}

TEST_CASE("torchscript: torch.save in a string or a comment is no call") {
    ScanReport r = judge(module("    _0 = \"torch.save(x, 'f')\"\n"
                                "    _1 = 'ops.aten.from_file(\"f\")'\n"
                                "    # torch.save((state)[0], \"/tmp/f\")\n"));
    CHECK(r.findings.empty());
}

TEST_CASE("torchscript: a file operator in forward is a finding that runs when the method is called") {
    ScanReport r = judge(module("", "    _0 = torch.save(x, \"/tmp/owned\")\n    return x\n"));
    REQUIRE(r.findings.size() == 1);
    CHECK(r.findings[0].severity == GlobalClass::dangerous);
    CHECK(contains(r.findings[0].message, "M.forward"));
    CHECK(contains(r.findings[0].message, "aten::save"));
    CHECK(contains(r.findings[0].message, "runs when the scripted model's method is called"));
}
