// psar keys — prints every configuration key as a Markdown table (the source
// of docs/config.md, so the documentation cannot drift from the schema).

#include <cstdio>
#include <string>

#include "tools/cli.h"
#include "trainer/schema.h"

namespace psar {

int cmd_keys(CliContext&) {
  std::printf("| key | type | default | meaning |\n|---|---|---|---|\n");
  static const char* types[] = {"int", "float", "bool", "string", "bytes", "duration",
                                "bandwidth", "int list", "string list", "any"};
  for (const auto& [key, spec] : config_schema().keys()) {
    std::string type = types[static_cast<int>(spec.type)];
    if (const auto choices = spec.allowed(); !choices.empty()) {
      type = "";
      for (const auto& c : choices) type += (type.empty() ? "" : " \\| ") + c;
    }
    std::printf("| `%s` | %s | %s | %s |\n", key.c_str(), type.c_str(),
                spec.default_yaml.empty() ? "—" : ("`" + spec.default_yaml + "`").c_str(),
                spec.doc.c_str());
  }
  return 0;
}

}  // namespace psar
