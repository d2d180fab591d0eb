// Renders a chat template (data/jinja.h) for each context of a JSONL file,
// for tests/e2e/tokenizer/chat_templates.py:
//
//   jinja_render_driver TEMPLATE.jinja CONTEXTS.jsonl
//
// One JSON line per context: {"text": rendered} or {"error": message}. A
// template that does not parse gives one {"error": ...} line and exit 0.
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "claw/core/error.h"
#include "claw/data/jinja.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: jinja_render_driver TEMPLATE.jinja CONTEXTS.jsonl\n";
    return 2;
  }
  std::ifstream tf(argv[1]);
  const std::string source((std::istreambuf_iterator<char>(tf)), std::istreambuf_iterator<char>());
  std::unique_ptr<claw::data::jinja::Template> t;
  try {
    t = std::make_unique<claw::data::jinja::Template>(source, argv[1]);
  } catch (const claw::Error& e) {
    std::cout << nlohmann::json{{"error", e.what()}}.dump() << "\n";
    return 0;
  }
  std::ifstream cf(argv[2]);
  for (std::string line; std::getline(cf, line);) {
    try {
      std::cout << nlohmann::json{{"text", t->render(nlohmann::ordered_json::parse(line))}}.dump(
                       -1, ' ', false, nlohmann::json::error_handler_t::replace)
                << "\n";
    } catch (const claw::Error& e) {
      std::cout << nlohmann::json{{"error", e.what()}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                << "\n";
    }
  }
  return 0;
}
