// Prints claw's rank groups for the configurations read from stdin, in the
// format of rank_groups_reference.py (which runs this tool and compares).
//
// Each input line: world tp cp ep pp order item...
// where an item is dense:<token>, expert:<token>, embedding or coords.
// Output per line: "config <the line>", then "error" when RankGrid::make
// refuses the configuration, else one line per item:
//   dense:tp 0,1 2,3        (lists separated by spaces)
//   coords 0,0,0,0 1,0,0,0  (tp,cp,dp,pp of each world rank)
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "claw/comm/parallel_state.h"
#include "claw/core/error.h"

namespace {

void print_lists(const std::string& label, const std::vector<std::vector<int>>& lists) {
  std::cout << label;
  for (const auto& l : lists) {
    std::cout << ' ';
    for (size_t i = 0; i < l.size(); ++i) std::cout << (i ? "," : "") << l[i];
  }
  std::cout << '\n';
}

}  // namespace

int main() {
  std::ios::sync_with_stdio(false);
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    std::istringstream in(line);
    int world = 0;
    claw::comm::ParallelSizes s;
    in >> world >> s.tp >> s.cp >> s.ep >> s.pp >> s.order;
    std::cout << "config " << line << '\n';
    claw::comm::RankGrid g;
    try {
      g = claw::comm::RankGrid::make(world, s);
    } catch (const claw::Error&) {
      std::cout << "error\n";
      continue;
    }
    for (std::string item; in >> item;) {
      if (item.starts_with("dense:")) {
        print_lists(item, g.groups(item.substr(6)));
      } else if (item.starts_with("expert:")) {
        print_lists(item, g.expert_groups(item.substr(7)));
      } else if (item == "embedding") {
        print_lists(item, g.embedding_groups());
      } else if (item == "coords") {
        std::vector<std::vector<int>> coords;
        for (int r = 0; r < world; ++r) coords.push_back({g.tp_rank(r), g.cp_rank(r), g.dp_rank(r), g.pp_rank(r)});
        print_lists(item, coords);
      } else {
        std::cerr << "unknown item " << item << '\n';
        return 2;
      }
    }
  }
  return 0;
}
