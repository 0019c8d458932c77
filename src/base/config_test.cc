#include <kiln/base/config.h>

#include <sys/stat.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "base/testing/temp_path.h"

namespace kiln {
namespace {

// A config shaped like the ones Kiln reads: scalars at the top, a nested section, labels.
struct TestConfig {
  int32_t port = 9100;
  std::string bind = "127.0.0.1";
  double interval_s = 1.0;
  bool verbose = false;
  std::string mode = "local";
  std::map<std::string, std::string> labels;
  std::vector<std::string> hosts;
  int n_layer = 0;
  int n_head = 0;
};

Status read_config(const std::string& text, TestConfig* c, const std::string& name = "test.yaml") {
  KILN_ASSIGN_OR_RETURN(ConfigDocument doc, ConfigDocument::parse(text, name));
  ConfigReader root = doc.root();
  root.read_int("port", &c->port, 0, 65535)
      .read_string("bind", &c->bind)
      .read_double("interval_s", &c->interval_s, 0.001, 3600)
      .read_bool("verbose", &c->verbose)
      .read_enum("mode", &c->mode, {"local", "slurm"})
      .read_string_map("labels", &c->labels)
      .read_string_list("hosts", &c->hosts);
  ConfigReader model = root.section("model", kRequired);
  model.read_int("n_layer", &c->n_layer, 1, 1024, kRequired).read_int("n_head", &c->n_head, 1, 256);
  return doc.finish();
}

constexpr const char* kGood = R"(port: 9200
bind: 0.0.0.0
interval_s: 0.5
verbose: true
mode: slurm
labels: {rack: r1, switch: s3}
hosts: [n1, n2]
model:
  n_layer: 6
  n_head: 6
)";

TEST(ConfigTest, ReadsEveryType) {
  TestConfig c;
  ASSERT_TRUE(read_config(kGood, &c).ok()) << read_config(kGood, &c).to_string();
  EXPECT_EQ(c.port, 9200);
  EXPECT_EQ(c.bind, "0.0.0.0");
  EXPECT_DOUBLE_EQ(c.interval_s, 0.5);
  EXPECT_TRUE(c.verbose);
  EXPECT_EQ(c.mode, "slurm");
  EXPECT_EQ(c.labels.at("switch"), "s3");
  EXPECT_EQ(c.hosts, (std::vector<std::string>{"n1", "n2"}));
  EXPECT_EQ(c.n_layer, 6);
}

TEST(ConfigTest, AbsentOptionalKeysKeepTheirDefaults) {
  TestConfig c;
  ASSERT_TRUE(read_config("model: {n_layer: 2}\n", &c).ok());
  EXPECT_EQ(c.port, 9100);
  EXPECT_EQ(c.bind, "127.0.0.1");
  EXPECT_EQ(c.n_head, 0);
}

TEST(ConfigTest, UnknownKeyNamesFileLineKeyAndSuggestsTheNearest) {
  TestConfig c;
  Status s =
      read_config("port: 9200\nmodel:\n  n_layer: 6\n  n_haed: 6\n", &c, "configs/tiny.yaml");
  ASSERT_TRUE(s.is_invalid_argument());
  EXPECT_NE(s.message().find("configs/tiny.yaml:4:3: key 'model.n_haed': unknown key; did you "
                             "mean 'n_head'?"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("known keys: n_head, n_layer"), std::string::npos) << s.message();
}

TEST(ConfigTest, WrongTypeNamesLineAndKey) {
  TestConfig c;
  Status s = read_config("model:\n  n_layer: six\n", &c, "tiny.yaml");
  ASSERT_TRUE(s.is_invalid_argument());
  EXPECT_EQ(s.message(), "tiny.yaml:2:12: key 'model.n_layer': expected an integer, got 'six'");
}

TEST(ConfigTest, QuotedNumbersAreStringsNotIntegers) {
  TestConfig c;
  Status s = read_config("port: \"9200\"\nmodel: {n_layer: 1}\n", &c);
  EXPECT_EQ(s.message(), "test.yaml:1:7: key 'port': expected an integer, got the string \"9200\"");
}

TEST(ConfigTest, RejectsFractionsHexAndYamlOneOneBooleans) {
  TestConfig c;
  EXPECT_FALSE(read_config("port: 9200.5\nmodel: {n_layer: 1}\n", &c).ok());
  EXPECT_FALSE(read_config("port: 0x10\nmodel: {n_layer: 1}\n", &c).ok());
  Status s = read_config("verbose: yes\nmodel: {n_layer: 1}\n", &c);
  EXPECT_EQ(s.message(), "test.yaml:1:10: key 'verbose': expected true or false, got 'yes'");
  EXPECT_FALSE(read_config("interval_s: .nan\nmodel: {n_layer: 1}\n", &c).ok());
}

TEST(ConfigTest, OutOfRangeNamesTheRange) {
  TestConfig c;
  Status s = read_config("port: 70000\nmodel: {n_layer: 0}\n", &c);
  EXPECT_EQ(s.message(),
            "test.yaml:1:7: key 'port': 70000 is out of range [0, 65535]\n"
            "test.yaml:2:18: key 'model.n_layer': 0 is out of range [1, 1024]");
  EXPECT_EQ(c.port, 9100);  // a rejected value never reaches the output
}

TEST(ConfigTest, MissingRequiredKeysAndSections) {
  TestConfig c;
  Status s = read_config("port: 1\n", &c);
  EXPECT_EQ(s.message(), "test.yaml:1:1: key 'model': required key is missing");
  s = read_config("model:\n  n_head: 2\n", &c);
  EXPECT_EQ(s.message(), "test.yaml:2:3: key 'model.n_layer': required key is missing");
}

TEST(ConfigTest, DuplicateKeysAreErrors) {
  TestConfig c;
  Status s = read_config("port: 1\nport: 2\nmodel: {n_layer: 1}\n", &c);
  EXPECT_EQ(s.message(), "test.yaml:2:1: key 'port': duplicate key");
}

TEST(ConfigTest, WrongShapes) {
  TestConfig c;
  Status s = read_config("labels: [a, b]\nhosts: n1\nmodel: 3\nmode: k8s\n", &c);
  EXPECT_EQ(s.message(),
            "test.yaml:1:9: key 'labels': expected a mapping of strings, got a sequence\n"
            "test.yaml:2:8: key 'hosts': expected a sequence of strings, got 'n1'\n"
            "test.yaml:3:8: key 'model': expected a mapping, got '3'\n"
            "test.yaml:4:7: key 'mode': expected one of local, slurm, got 'k8s'");
}

TEST(ConfigTest, NullValueIsNotAnAbsentKey) {
  TestConfig c;
  Status s = read_config("port:\nmodel: {n_layer: 1}\n", &c);
  EXPECT_NE(s.message().find("key 'port': expected an integer, got null"), std::string::npos)
      << s.message();
}

TEST(ConfigTest, SyntaxErrorNamesLine) {
  Result<ConfigDocument> doc = ConfigDocument::parse("a: 1\nb: [1, 2\nc: 3\n", "broken.yaml");
  ASSERT_FALSE(doc.ok());
  EXPECT_TRUE(doc.status().is_invalid_argument());
  EXPECT_EQ(doc.status().message().rfind("broken.yaml:", 0), 0u) << doc.status().message();
  EXPECT_NE(doc.status().message().find("YAML syntax error"), std::string::npos);
}

TEST(ConfigTest, TopLevelMustBeAMapping) {
  Result<ConfigDocument> doc = ConfigDocument::parse("- a\n- b\n", "list.yaml");
  EXPECT_EQ(doc.status().message(),
            "list.yaml:1: expected a mapping of keys at the top level, got a sequence");
}

TEST(ConfigTest, EmptyDocumentIsAnEmptyMapping) {
  Result<ConfigDocument> doc = ConfigDocument::parse("", "empty.yaml");
  ASSERT_TRUE(doc.ok());
  int port = 5;
  doc->root().read_int("port", &port);
  EXPECT_TRUE(doc->finish().ok());
  EXPECT_EQ(port, 5);
}

TEST(ConfigTest, LoadFileReadsFromDiskAndNamesMissingFiles) {
  const std::string path = kiln::testing::unique_temp_path("config.yaml");
  {
    std::ofstream out(path);
    out << "model:\n  n_layer: 3\n  n_layers: 4\n";
  }
  TestConfig c;
  Result<ConfigDocument> doc = ConfigDocument::load_file(path);
  ASSERT_TRUE(doc.ok());
  doc->root().section("model").read_int("n_layer", &c.n_layer);
  Status s = doc->finish();
  EXPECT_NE(s.message().find(path + ":3:3: key 'model.n_layers': unknown key; did you mean "
                                    "'n_layer'?"),
            std::string::npos)
      << s.message();
  std::remove(path.c_str());
  Result<ConfigDocument> missing = ConfigDocument::load_file(path);
  EXPECT_TRUE(missing.status().is_not_found());
  EXPECT_NE(missing.status().message().find(path), std::string::npos);
}

TEST(ConfigTest, IntClampsTheRangeToTheOutputType) {
  Result<ConfigDocument> doc = ConfigDocument::parse("small: 300\nbig: -1\n", "t.yaml");
  ASSERT_TRUE(doc.ok());
  uint8_t small = 0;
  uint64_t big = 0;
  doc->root().read_int("small", &small).read_int("big", &big);
  Status s = doc->finish();
  EXPECT_EQ(s.message(),
            "t.yaml:1:8: key 'small': 300 is out of range [0, 255]\n"
            "t.yaml:2:6: key 'big': -1 is out of range [0, 9223372036854775807]");
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

TEST(ConfigTest, StringMapKeyCheckReportsAtTheKey) {
  Result<ConfigDocument> doc =
      ConfigDocument::parse("labels:\n  rack: r1\n  bad-name: x\n", "agent.yaml");
  ASSERT_TRUE(doc.ok());
  std::map<std::string, std::string> labels;
  doc->root().read_string_map("labels", &labels, kOptional, [](const std::string& key) {
    return key.find('-') == std::string::npos ? "" : "not a valid label name";
  });
  EXPECT_EQ(doc->finish().message(),
            "agent.yaml:3:3: key 'labels.bad-name': not a valid label name");
  EXPECT_TRUE(labels.empty());  // a rejected map never reaches the output
}

}  // namespace
}  // namespace kiln

// Issue 10: inputs that hung, exhausted memory or were reported as something else.
namespace kiln {
namespace {

TEST(ConfigFileTest, EveryBadLabelIsReportedNotOnlyTheFirst) {
  Result<ConfigDocument> doc =
      ConfigDocument::parse("labels:\n  bad-one: x\n  rack: r1\n  bad-two: y\n", "agent.yaml");
  ASSERT_TRUE(doc.ok());
  std::map<std::string, std::string> labels;
  doc->root().read_string_map("labels", &labels, kOptional, [](const std::string& key) {
    return key.find('-') == std::string::npos ? "" : "not a valid label name";
  });
  EXPECT_EQ(doc->finish().message(),
            "agent.yaml:2:3: key 'labels.bad-one': not a valid label name\n"
            "agent.yaml:4:3: key 'labels.bad-two': not a valid label name");
  EXPECT_TRUE(labels.empty());
}

TEST(ConfigFileTest, ADirectoryIsNamedAsOneNotAsAMissingKey) {
  const std::string dir = kiln::testing::unique_temp_dir("config_dir");
  Result<ConfigDocument> doc = ConfigDocument::load_file(dir);
  ASSERT_FALSE(doc.ok());
  EXPECT_TRUE(doc.status().is_invalid_argument());
  EXPECT_EQ(doc.status().message(), "config file " + dir + ": is a directory, not a file");
}

TEST(ConfigFileTest, AFifoOrADeviceIsRefusedWithoutBlocking) {
  // Before, a FIFO with no writer blocked the open forever and /dev/zero read until bad_alloc.
  const std::string fifo = kiln::testing::unique_temp_path("config.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& path : {fifo, std::string("/dev/zero")}) {
    Result<ConfigDocument> doc = ConfigDocument::load_file(path);
    ASSERT_FALSE(doc.ok()) << path;
    EXPECT_TRUE(doc.status().is_invalid_argument()) << doc.status().to_string();
    EXPECT_EQ(doc.status().message(), "config file " + path +
                                          ": not a regular file (a FIFO, socket or device); a "
                                          "config must be a file");
  }
  std::remove(fifo.c_str());
}

TEST(ConfigFileTest, AFileOverTheBoundIsRefusedNamingTheBound) {
  const std::string path = kiln::testing::unique_temp_path("big.yaml");
  {
    std::ofstream out(path);
    out << "# " << std::string(kConfigBytesMax, 'x') << "\n";
  }
  Result<ConfigDocument> doc = ConfigDocument::load_file(path);
  ASSERT_FALSE(doc.ok());
  EXPECT_EQ(doc.status().message(), "config file " + path + ": " +
                                        std::to_string(kConfigBytesMax + 3) +
                                        " bytes, more than the 1048576 a config may have");
  EXPECT_FALSE(ConfigDocument::parse(std::string(kConfigBytesMax + 1, ' '), "t.yaml").ok());
  std::remove(path.c_str());
}

TEST(ConfigFileTest, DeepNestingSaysSoInsteadOfBadFile) {
  for (const std::string& deep : {std::string(100'000, '['),
                                  [] {
                                    std::string s;
                                    for (int i = 0; i < 5000; ++i)
                                      s += "- ";
                                    return s + "x";
                                  }(),
                                  "a: " + std::string(50'000, '{')}) {
    Result<ConfigDocument> doc = ConfigDocument::parse(deep, "deep.yaml");
    ASSERT_FALSE(doc.ok());
    EXPECT_TRUE(doc.status().is_invalid_argument());
    EXPECT_NE(doc.status().message().find("deep.yaml:1:"), std::string::npos)
        << doc.status().message();
    EXPECT_NE(doc.status().message().find("YAML nested too deeply"), std::string::npos)
        << doc.status().message();
  }
}

TEST(ConfigFileTest, MessagesQuoteLongScalarsShortly) {
  Result<ConfigDocument> doc = ConfigDocument::parse(std::string(10'000, 'x'), "t.yaml");
  ASSERT_FALSE(doc.ok());
  EXPECT_EQ(doc.status().message(), "t.yaml:1: expected a mapping of keys at the top level, got '" +
                                        std::string(64, 'x') + "...'");
}

TEST(ConfigFileTest, RangeErrorsPrintNumbersShortly) {
  // 1 followed by 308 zeros: the message printed all 309 digits back.
  Result<ConfigDocument> doc =
      ConfigDocument::parse("lr: 1" + std::string(308, '0') + "\n", "t.yaml");
  ASSERT_TRUE(doc.ok());
  double lr = 0.1;
  doc->root().read_double("lr", &lr, 0, 1);
  EXPECT_EQ(doc->finish().message(), "t.yaml:1:5: key 'lr': 1e+308 is out of range [0, 1]");
  EXPECT_EQ(lr, 0.1);
}

TEST(ConfigReaderTest, KeysIsMappingAndReportServeMappingsOfData) {
  Result<ConfigDocument> doc = ConfigDocument::parse(
      "env:\n  B: plain\n  A: {value: x, secret: true}\nnodes: 3\n", "t.yaml");
  ASSERT_TRUE(doc.ok());
  ConfigReader root = doc->root();
  ConfigReader env = root.section("env");
  EXPECT_EQ(env.keys(), (std::vector<std::string>{"B", "A"}));  // document order
  EXPECT_FALSE(env.is_mapping("B"));
  EXPECT_TRUE(env.is_mapping("A"));
  EXPECT_FALSE(env.is_mapping("missing"));
  EXPECT_TRUE(root.section("absent").keys().empty());
  // Neither keys() nor is_mapping() marks a key known: unread keys are still reported.
  EXPECT_NE(doc->finish().message().find("key 'env.B': unknown key"), std::string::npos);

  std::string b;
  std::string a;
  bool secret = false;
  env.read_string("B", &b);
  env.section("A").read_string("value", &a).read_bool("secret", &secret);
  int nodes = 0;
  root.read_int("nodes", &nodes);
  EXPECT_TRUE(doc->finish().ok()) << doc->finish().message();
  root.report("nodes", "more than the cluster has");
  root.report("config", "neither command nor config is set");
  EXPECT_EQ(doc->finish().message(),
            "t.yaml:1:1: key 'config': neither command nor config is set\n"
            "t.yaml:4:8: key 'nodes': more than the cluster has");
}

}  // namespace
}  // namespace kiln
