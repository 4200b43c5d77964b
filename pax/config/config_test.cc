// Config: path editing, parsing, errors with suggestions, templates swapped
// by name, sharing (set through any path, "@path"), partial configs, JSON
// round trips and printing.
#include "pax/config/config.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "pax/testing/testing.h"

namespace pax {
namespace {

enum class Mode : int { fast, exact };
PAX_ENUM(Mode, "fast", "exact")

struct InnerHParams : BaseHParams {
  int64_t dims = 4;
  double scale = 0.5;
  PAX_HPARAMS(TestInner, BaseHParams, (dims, "Depth.", range::size), (scale, "A scale.", range::finite));
};

struct OtherInnerHParams : InnerHParams {
  bool extra = false;
  PAX_HPARAMS(TestOtherInner, InnerHParams, (extra, "An extra flag."));
};

struct OuterHParams : BaseHParams {
  int64_t num_layers = 2;
  float dropout = 0.0f;
  int small = 3;
  bool use_bias = true;
  std::string name = "outer";
  DType dtype = DType::f32;
  std::vector<int64_t> shape = {1, 2};
  std::vector<double> rates = {0.5};
  std::vector<std::string> tags = {"a"};
  std::optional<int64_t> limit;
  Mode mode = Mode::fast;
  InnerHParams nested;
  HParamsPtr child = std::make_shared<InnerHParams>();
  std::vector<HParamsPtr> layers = {std::make_shared<InnerHParams>(), std::make_shared<InnerHParams>()};
  PAX_HPARAMS(TestOuter, BaseHParams, (num_layers, "Number of layers.", range::closed(0, 4096)),
              (dropout, "Dropout rate."), (small, "A 32-bit integer."), (use_bias, "Whether to add a bias."),
              (name, "A name."), (dtype, "Weight dtype."), (shape, "A shape."), (rates, "Rates."), (tags, "Tags."),
              (limit, "An optional limit."), (mode, "How to run."), (nested, "A nested struct."),
              (child, "A swappable template."), (layers, "A list of templates."));
};

// Templates two nested structs deep.
struct DeepHParams : BaseHParams {
  HParamsPtr tpl = std::make_shared<InnerHParams>();
  std::vector<HParamsPtr> list = {std::make_shared<InnerHParams>()};
  PAX_HPARAMS(TestDeep, BaseHParams, (tpl, "A template."), (list, "Templates."));
};
struct MidHParams : BaseHParams {
  DeepHParams deep;
  PAX_HPARAMS(TestMid, BaseHParams, (deep, "A nested struct."));
};
struct TopHParams : BaseHParams {
  MidHParams mid;
  HParamsPtr top = std::make_shared<InnerHParams>();
  PAX_HPARAMS(TestTop, BaseHParams, (mid, "A nested struct."), (top, "A template."));
};

PAX_REGISTER_HPARAMS(InnerHParams, "test");
PAX_REGISTER_HPARAMS(OtherInnerHParams, "test");
PAX_REGISTER_HPARAMS(OuterHParams, "test");
PAX_REGISTER_HPARAMS(TopHParams, "test");

TEST(Config, SetAndGetByPathWithTypedParsing) {
  Config c = Config::make("TestOuter");
  c.apply_overrides({"num_layers=6", "dropout=0.25", "small=-7", "use_bias=false", "name=\"decoder\"", "dtype=bfloat16",
                     "shape=[3, 4, 5]", "rates=0.1,0.2", "tags=[x, y]", "limit=10", "mode=exact", "nested.dims=8",
                     "child.scale=2.5", "layers[1].dims=16", "layers.0.scale=0.125"});
  auto& h = c.as<OuterHParams>();
  EXPECT_EQ(h.num_layers, 6);
  EXPECT_FLOAT_EQ(h.dropout, 0.25f);
  EXPECT_EQ(h.small, -7);
  EXPECT_FALSE(h.use_bias);
  EXPECT_EQ(h.name, "decoder");
  EXPECT_EQ(h.dtype, DType::bf16);
  EXPECT_EQ(h.shape, (std::vector<int64_t>{3, 4, 5}));
  EXPECT_EQ(h.rates, (std::vector<double>{0.1, 0.2}));
  EXPECT_EQ(h.tags, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(h.limit, 10);
  EXPECT_EQ(h.mode, Mode::exact);
  EXPECT_EQ(h.nested.dims, 8);
  EXPECT_EQ(static_cast<InnerHParams&>(*h.child).scale, 2.5);
  EXPECT_EQ(static_cast<InnerHParams&>(*h.layers[1]).dims, 16);
  EXPECT_EQ(c.get("layers[0].scale"), "0.125");
  EXPECT_EQ(c.get("mode"), "exact");
  EXPECT_EQ(c.get("shape"), "[3, 4, 5]");
  c.set("limit", "None");
  EXPECT_FALSE(h.limit.has_value());
}

TEST(Config, MistakesFailWithSuggestions) {
  Config c = Config::make("TestOuter");
  EXPECT_PAX_ERROR(c.set("num_layer", "3"),
                   "no field 'num_layer' in TestOuter; did you mean 'num_layers'? valid fields: num_layers, dropout");
  EXPECT_PAX_ERROR(c.set("num_layers", "six"), "field 'num_layers' of TestOuter is an integer; cannot set it to 'six'");
  EXPECT_PAX_ERROR(c.set("use_bias", "maybe"), "is a bool (true or false)");
  EXPECT_PAX_ERROR(c.set("dtype", "float8"), "is a dtype");
  EXPECT_PAX_ERROR(c.set("mode", "exct"), "'exct' is not one of its values; did you mean 'exact'? valid: fast, exact");
  EXPECT_PAX_ERROR(c.set("child", "TestInnr"), "unknown config type 'TestInnr'; did you mean 'TestInner'?");
  EXPECT_PAX_ERROR(c.set("child.dimz", "1"), "no field 'dimz' in TestInner; did you mean 'dims'?");
  EXPECT_PAX_ERROR(c.set("layers[5].dims", "1"), "index 5 is out of range for 'layers' (2 elements)");
  // A list index that is not a number is a config error, not std::stoul's.
  EXPECT_PAX_ERROR(c.set("layers[a].dims", "1"), "list index 'a' in path 'layers[a].dims' is not a number");
  EXPECT_PAX_ERROR(c.set("layers[].dims", "1"), "list index '' in path 'layers[].dims' is not a number");
  EXPECT_PAX_ERROR(c.set("layers[-1].dims", "1"), "list index '-1'");
  EXPECT_PAX_ERROR(c.set("layers[99999999999999999999].dims", "1"), "is not a number");
  EXPECT_PAX_ERROR(c.set("layers.dims", "1"), "is a list; give an index");
  EXPECT_PAX_ERROR(c.set("nested", "3"), "set its elements' fields by path instead");
  EXPECT_PAX_ERROR(c.apply_overrides({"num_layers"}), "must look like path=value");
  EXPECT_PAX_ERROR(Config::make("NoSuchType"), "unknown config type 'NoSuchType'");
}

TEST(Config, TemplatesSwapTypeByName) {
  Config c = Config::make("TestOuter");
  c.set("child", "TestOtherInner");
  EXPECT_STREQ(c.as<OuterHParams>().child->type_name(), "TestOtherInner");
  c.set("child.extra", "true");
  EXPECT_TRUE(static_cast<OtherInnerHParams&>(*c.as<OuterHParams>().child).extra);
  c.set("child", "None");
  EXPECT_EQ(c.as<OuterHParams>().child, nullptr);
  EXPECT_PAX_ERROR(c.set("child.dims", "1"), "is None; set it to a type first");
  c.set("layers[0]", "TestOtherInner");
  EXPECT_STREQ(c.as<OuterHParams>().layers[0]->type_name(), "TestOtherInner");
}

TEST(Config, SharingDeepInsideNestedStructsSurvivesJson) {
  Config c = Config::make("TestTop");
  auto& h = c.as<TopHParams>();
  h.top = h.mid.deep.tpl;                              // shared from two nested structs down
  h.mid.deep.list = {h.mid.deep.tpl, h.mid.deep.tpl};  // and from a list down there
  c.set("top.dims", "7");
  const std::string json = c.to_json();
  EXPECT_EQ(std::count(json.begin(), json.end(), '$'), 4) << json;  // one "$id", three "$ref"s
  Config back = Config::from_json(json);
  auto& b = back.as<TopHParams>();
  EXPECT_EQ(b.top, b.mid.deep.tpl);
  EXPECT_EQ(b.mid.deep.list[0], b.top);
  EXPECT_EQ(b.mid.deep.list[1], b.top);
  EXPECT_EQ(static_cast<const InnerHParams&>(*b.mid.deep.list[1]).dims, 7);
  EXPECT_EQ(back.to_json(), json);
}

TEST(Config, JsonRoundTripPreservesValuesAndSharing) {
  Config c = Config::make("TestOuter");
  c.apply_overrides({"num_layers=9", "dtype=bf16", "limit=3", "mode=exact", "child=TestOtherInner", "child.extra=true",
                     "nested.scale=0.75"});
  auto& h = c.as<OuterHParams>();
  h.layers[1] = h.layers[0];  // one shared object, as Fiddle allows
  const std::string json = c.to_json();
  EXPECT_NE(json.find("\"$ref\""), std::string::npos) << json;
  Config back = Config::from_json(json);
  EXPECT_EQ(back, c);
  EXPECT_EQ(back.to_json(), json);
  auto& b = back.as<OuterHParams>();
  EXPECT_EQ(b.layers[0], b.layers[1]);  // still shared after loading
  EXPECT_NE(b.layers[0], h.layers[0]);
  Config copy = c.clone();
  EXPECT_EQ(copy, c);
  EXPECT_EQ(copy.as<OuterHParams>().layers[0], copy.as<OuterHParams>().layers[1]);
  copy.set("num_layers", "1");
  EXPECT_EQ(h.num_layers, 9);  // a deep copy
  EXPECT_PAX_ERROR(Config::from_json("{\"type\": \"TestOuter\", \"num_layrs\": 1}"), "did you mean 'num_layers'");
  EXPECT_PAX_ERROR(Config::from_json("{\"type\": \"TestOuter\", \"num_layers\": \"x\"}"), "must be an integer");
  EXPECT_PAX_ERROR(Config::from_json("{not json"), "not valid JSON");
}

// Hostile or mistaken JSON: bounded nesting (a 200,000-deep array once
// overflowed the stack while the error was printed), errors that quote at
// most a short excerpt of the input, integers that must fit their field, and
// list elements of the wrong type.
TEST(Config, JsonInputIsBoundedAndChecked) {
  const std::string deep =
      "{\"type\": \"TestOuter\", \"rates\": " + std::string(200000, '[') + std::string(200000, ']') + "}";
  EXPECT_PAX_ERROR(Config::from_json(deep), "nested deeper than 100 levels");
  // Neither a wrong value nor a malformed number is echoed whole.
  for (const std::string& big : {"{\"type\": \"TestOuter\", \"name\": [\"" + std::string(100000, 'x') + "\"]}",
                                 "{\"type\": \"TestOuter\", \"name\": [" + std::string(100000, '1') + "]}"}) {
    try {
      Config::from_json(big);
      ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
      EXPECT_LT(std::string(e.what()).size(), 400u) << "the error must not echo the input";
      EXPECT_NE(std::string(e.what()).find("characters)"), std::string::npos) << e.what();
    }
  }
  EXPECT_PAX_ERROR(Config::from_json("{\"type\": \"TestOuter\", \"small\": 3000000000}"),
                   "must be an integer from -2147483648 to 2147483647");
  EXPECT_PAX_ERROR(Config::from_json("{\"type\": \"TestOuter\", \"num_layers\": 18446744073709551615}"),
                   "must be an integer");
  EXPECT_PAX_ERROR(Config::from_json("{\"type\": \"TestOuter\", \"shape\": [1, \"x\"]}"), "field 'shape'");
  EXPECT_PAX_ERROR(Config::from_json("{\"type\": \"TestOuter\", \"rates\": [1, null]}"), "field 'rates'");
  EXPECT_PAX_ERROR(Config::from_json("{\"type\": \"TestOuter\", \"tags\": [1]}"), "field 'tags'");
  Config c = Config::make("TestOuter");
  EXPECT_PAX_ERROR(c.set("small", "3000000000"), "from -2147483648 to 2147483647");
  c.set("small", "-7");
  EXPECT_EQ(c.as<OuterHParams>().small, -7);
}

// fdl.Partial: fields left missing until a later call fills them; one error
// names all of them with their paths and types; completing gives a new
// config and JSON keeps the marks.
TEST(Config, PartialListsEveryMissingFieldUntilCompleted) {
  Config p = Config::partial("TestOuter", {"num_layers=4"}, {"name", "nested.dims", "layers[1].scale", "limit"});
  const std::vector<std::string> missing = {"name (a string)", "limit (an integer or None)", "nested.dims (an integer)",
                                            "layers[1].scale (a number)"};
  EXPECT_EQ(p.missing(), missing);
  EXPECT_EQ(p.as<OuterHParams>().num_layers, 4);
  EXPECT_PAX_ERROR(check_complete(p.root(), "build"),
                   "build: the TestOuter config is partial: 4 fields are missing: name (a string), limit (an integer "
                   "or None), nested.dims (an integer), layers[1].scale (a number); set them first");
  EXPECT_PAX_ERROR(p.get("nested.dims"), "'nested.dims' is missing");
  EXPECT_NE(p.str().find("  name = MISSING  # A name.\n"), std::string::npos) << p.str();
  EXPECT_PAX_ERROR(p.complete({"name=x", "limit=1"}),
                   "2 fields are missing: nested.dims (an integer), layers[1].scale");

  // JSON keeps the marks, and the copy is as partial as the original.
  const std::string json = p.to_json();
  EXPECT_NE(json.find("\"name\": {\n    \"$missing\": true\n  }"), std::string::npos) << json;
  Config back = Config::from_json(json);
  EXPECT_EQ(back.missing(), missing);
  EXPECT_EQ(back.to_json(), json);
  EXPECT_EQ(p.clone().missing(), missing);

  // Filled one by one with set(), or all at once by complete() (a copy).
  p.set("name", "decoder");
  EXPECT_EQ(p.missing().size(), 3u);
  Config done = p.complete({"nested.dims=8", "layers[1].scale=2", "limit=None"});
  EXPECT_TRUE(done.missing().empty());
  check_complete(done.root(), "build");
  EXPECT_EQ(done.as<OuterHParams>().nested.dims, 8);
  EXPECT_EQ(done.get("name"), "decoder");
  EXPECT_EQ(p.missing().size(), 3u);  // the partial itself is unchanged
  EXPECT_EQ(done.to_json().find("$missing"), std::string::npos);
}

TEST(Config, PartialTemplatesAndSharedFieldsAndMistakes) {
  Config c = Config::make("TestOuter");
  c.mark_missing("child");  // a template left to choose: None until set
  EXPECT_EQ(c.as<OuterHParams>().child, nullptr);
  EXPECT_EQ(c.missing(), (std::vector<std::string>{"child (a config template (a registered type name, None, or @path "
                                                   "of a template to share))"}));
  c.set("child", "TestOtherInner");
  EXPECT_TRUE(c.missing().empty());
  // A shared template's missing field is listed once and filled through any path.
  c.set("layers[1]", "@child");
  c.mark_missing("child.scale");
  EXPECT_EQ(c.missing(), (std::vector<std::string>{"child.scale (a number)"}));
  c.set("layers[1].scale", "3");
  EXPECT_TRUE(c.missing().empty());
  EXPECT_EQ(c.get("child.scale"), "3");

  EXPECT_PAX_ERROR(c.mark_missing("nested"), "only single fields can be missing, so mark its fields instead");
  EXPECT_PAX_ERROR(c.mark_missing("layers"), "only single fields can be missing");
  EXPECT_PAX_ERROR(c.mark_missing("layers[0]"), "'layers[0]' is a list element; only a field can be missing");
  EXPECT_PAX_ERROR(c.mark_missing("num_layer"), "did you mean 'num_layers'?");
  EXPECT_PAX_ERROR(Config::from_json("{\"type\": \"TestOuter\", \"nested\": {\"$missing\": true}}"),
                   "'nested' (nested of TestOuter) is a nested config");
}

// A template shared by several fields is one object whichever path names
// it: fields set through one path read back through every other, a type
// swapped through one path is swapped for all, and "@path" shares.
TEST(Config, SharedTemplatesAreSetThroughAnyPath) {
  Config c = Config::make("TestOuter");
  auto& h = c.as<OuterHParams>();
  c.set("layers[1]", "@child");
  EXPECT_EQ(h.layers[1], h.child);
  c.set("layers.1.dims", "8");
  c.set("child.scale", "0.25");
  EXPECT_EQ(c.get("child.dims"), "8");
  EXPECT_EQ(c.get("layers[1].scale"), "0.25");
  EXPECT_EQ(c.get("layers[0].dims"), "4");  // not shared

  c.set("layers[1]", "TestOtherInner");  // swapped everywhere it is shared
  EXPECT_STREQ(h.child->type_name(), "TestOtherInner");
  EXPECT_EQ(h.layers[1], h.child);
  EXPECT_STREQ(h.layers[0]->type_name(), "TestInner");
  c.set("child.extra", "true");
  EXPECT_EQ(c.get("layers[1].extra"), "true");

  // Printed once, each place listing every path that reaches it.
  const std::string s = c.str(false);
  EXPECT_NE(s.find("  child = TestOtherInner  [shared: child, layers[1]]\n    dims = 4\n"), std::string::npos) << s;
  const std::string last = "    [1] = TestOtherInner  [shared: child, layers[1]]\n";  // not expanded again
  EXPECT_EQ(s.substr(s.size() - last.size()), last) << s;
  EXPECT_EQ(s.find("extra"), s.rfind("extra")) << s;

  // The sharing survives a copy and JSON, and the copies stay editable as one.
  Config back = Config::from_json(c.to_json());
  back.set("layers[1].dims", "2");
  EXPECT_EQ(back.get("child.dims"), "2");
  EXPECT_EQ(c.get("child.dims"), "4");

  c.set("child", "None");  // None too: no field is left with a stale copy
  EXPECT_EQ(h.layers[1], nullptr);
  EXPECT_PAX_ERROR(c.set("child", "@num_layers"), "'num_layers' is an integer, not a template");
  EXPECT_PAX_ERROR(c.set("child", "@nested"), "'nested' is a nested config");
  EXPECT_PAX_ERROR(c.set("child", "@layers[1]"), "'layers[1]' is None");
  EXPECT_PAX_ERROR(c.set("child", "@layers[7]"), "index 7 is out of range");
  EXPECT_PAX_ERROR(c.set("num_layers", "@child"), "is an integer; cannot set it to '@child'");
  c.set("child", "TestTop");
  EXPECT_PAX_ERROR(c.set("child.top", "@child"), "that template contains 'child.top', so it would contain itself");
  EXPECT_PAX_ERROR(c.set("child.mid.deep.list[0]", "@child"), "would contain itself");
  c.set("layers[0]", "@child.mid.deep.tpl");  // sharing from deeper down is fine
  c.set("child.mid.deep.tpl.dims", "5");
  EXPECT_EQ(c.get("layers[0].dims"), "5");
}

TEST(Config, PrintsReadably) {
  Config c = Config::make("TestOuter");
  const std::string s = c.str();
  EXPECT_NE(s.find("TestOuter\n  num_layers = 2  # Number of layers.\n"), std::string::npos) << s;
  EXPECT_NE(s.find("  name = \"outer\""), std::string::npos) << s;
  EXPECT_NE(s.find("  child = TestInner  # A swappable template.\n    dims = 4  # Depth."), std::string::npos) << s;
  EXPECT_NE(s.find("    [1] = TestInner"), std::string::npos) << s;
  EXPECT_EQ(c.str(false).find("#"), std::string::npos);
}

}  // namespace
}  // namespace pax
