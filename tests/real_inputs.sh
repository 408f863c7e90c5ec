# Inputs of the real-program cases, shared by tests/real_programs.sh (which
# compares outputs with and without the pool) and bench/run_bench.py (which
# times the same work under each allocator).  Source it, then:
#
#   gen_c FILE [N]    a C file of N functions (default 300: work for cc1)
#   gen_cxx FILE      a C++ file with templates and standard containers
#   gen_sql FILE [N]  an sqlite3 script: N rows (default 200000), indexes,
#                     joins, VACUUM
#
# The outputs are deterministic, so any correct allocator gives the same.

gen_c() {
  # A few hundred functions with loops, switches, arrays and structs: enough
  # work for the optimiser that cc1 allocates a good deal.
  awk -v n="${2:-300}" 'BEGIN {
    print "#include <stdio.h>"
    print "#include <string.h>"
    print "struct s { int a[16]; double d; const char *name; };"
    for (i = 0; i < n; i++) {
      printf "static int f%d(int x, struct s *p) {\n", i
      printf "  int acc = %d;\n", i
      printf "  for (int k = 0; k < 16; k++) { p->a[k] += (x ^ k) * %d; acc += p->a[k] %% %d; }\n", i % 13 + 1, i % 7 + 2
      printf "  switch (x %% 5) { case 0: acc *= 3; break; case 1: acc -= %d; break;\n", i
      printf "    case 2: p->d += acc * 0.5; break; case 3: acc ^= (int)strlen(p->name); break; default: acc += %d; }\n", i * 7
      if (i > 0) printf "  if (acc & 1) acc += f%d(x + 1, p) & 0xff;\n", i - 1
      printf "  return acc;\n}\n"
    }
    print "int main(void) {"
    print "  struct s st; memset(&st, 0, sizeof st); st.name = \"kame\";"
    print "  unsigned long sum = 0;"
    for (i = 0; i < n; i += 7) printf "  sum = sum * 31 + (unsigned)f%d(%d, &st);\n", i, i
    print "  printf(\"%lu %.3f\\n\", sum, st.d);"
    print "  return 0;"
    print "}"
  }' >"$1"
}

gen_cxx() {
  cat >"$1" <<'EOF'
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

template <int N> struct Node {
  std::vector<std::string> names;
  std::map<int, std::unique_ptr<Node<N - 1>>> kids;
  int sum() const {
    int s = (int)names.size();
    for (const auto &k : kids) s += k.first + k.second->sum();
    return s;
  }
};
template <> struct Node<0> {
  int sum() const { return 1; }
};

int main() {
  Node<4> root;
  for (int i = 0; i < 40; i++) {
    root.names.push_back(std::string(i * 13, 'a' + i % 26));
    root.kids[i] = std::make_unique<Node<3>>();
  }
  std::unordered_map<std::string, int> counts;
  for (int i = 0; i < 100000; i++) counts[std::to_string(i % 977)] += i;
  std::vector<int> v;
  for (auto &kv : counts) v.push_back(kv.second % 1000);
  std::sort(v.begin(), v.end());
  std::printf("%d %zu %d %d\n", root.sum(), counts.size(), v.front(), v.back());
  return 0;
}
EOF
}

gen_sql() {
  sed "s/@ROWS@/${2:-200000}/g" >"$1" <<'EOF'
PRAGMA cache_size = -65536;
-- No fsync: the timing should be the program's, not the disk's.
PRAGMA synchronous = OFF;
CREATE TABLE t(id INTEGER PRIMARY KEY, a INTEGER, b TEXT, c REAL);
WITH RECURSIVE seq(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM seq WHERE x < @ROWS@)
INSERT INTO t SELECT x, (x * 1103515245 + 12345) % 50021,
  printf('s%05d-%s', x % 997, substr('abcdefghijklmnopqrstuvwxyz', 1 + x % 13)),
  (x % 1000) / 8.0 FROM seq;
CREATE INDEX ta ON t(a);
CREATE INDEX tb ON t(b, c);
SELECT count(*), sum(a), min(b), max(b), total(c) FROM t;
SELECT a % 10, count(*), sum(c) FROM t GROUP BY a % 10 ORDER BY 1;
SELECT b, count(*) FROM t GROUP BY b ORDER BY count(*) DESC, b LIMIT 5;
SELECT count(DISTINCT a), count(DISTINCT b) FROM t;
SELECT group_concat(id) FROM (SELECT id FROM t WHERE a < 40 ORDER BY id);
SELECT length(group_concat(b, ',')) FROM t;
SELECT length(zeroblob(5000000)), length(printf('%.*c', 3000000, 'x'));
SELECT t1.id, t2.id FROM t t1 JOIN t t2 ON t1.a = t2.a AND t1.id < t2.id ORDER BY t1.id LIMIT 10;
UPDATE t SET b = b || b || b WHERE id % 3 = 0;
DELETE FROM t WHERE id % 5 = 0;
SELECT count(*), sum(length(b)) FROM t;
SELECT b, max(a) FROM t WHERE b LIKE 's0001%' GROUP BY b ORDER BY b LIMIT 5;
VACUUM;
PRAGMA integrity_check;
SELECT count(*) FROM t WHERE a BETWEEN 1000 AND @ROWS@;
EOF
}

gen_cxx_templates() {
  # A translation unit that is mostly template instantiation: 24 record
  # types, each through map, unordered_map, variant, tuple, sort with
  # lambdas, std::function and a recursive compile-time computation.  The
  # compiler's front end and optimiser allocate heavily on it.
  cat >"$1" <<'EOF_CXX'
#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

template <int N> struct Fib { static constexpr long v = Fib<N - 1>::v + Fib<N - 2>::v; };
template <> struct Fib<1> { static constexpr long v = 1; };
template <> struct Fib<0> { static constexpr long v = 0; };

template <int I> struct Rec {
  int id = I;
  std::string name = "rec" + std::to_string(I);
  std::vector<double> xs = std::vector<double>(I % 7 + 2, I * 0.5);
  bool operator<(const Rec &o) const { return std::tie(id, name) < std::tie(o.id, o.name); }
};

template <int I> long work() {
  std::map<std::string, std::vector<Rec<I>>> by_name;
  std::unordered_map<int, std::unique_ptr<Rec<I>>> by_id;
  using Mixed = std::variant<int, double, std::string, Rec<I>>;
  std::vector<Mixed> mixed;
  std::vector<std::tuple<int, std::string, Rec<I>>> rows;
  std::function<long(const Rec<I> &)> weigh = [](const Rec<I> &r) {
    return static_cast<long>(std::accumulate(r.xs.begin(), r.xs.end(), 0.0)) + r.id;
  };
  for (int k = 0; k < 50; k++) {
    Rec<I> r;
    r.id = (k * 37 + I) % 101;
    by_name[std::to_string(k % 9)].push_back(r);
    by_id[k] = std::make_unique<Rec<I>>(r);
    mixed.push_back(k % 4 == 0 ? Mixed(k) : Mixed(r));
    rows.emplace_back(k, r.name, r);
  }
  std::sort(rows.begin(), rows.end(), [](const auto &a, const auto &b) { return std::get<2>(a) < std::get<2>(b); });
  long sum = Fib<20 + I % 10>::v % 1000;
  for (const auto &v : mixed)
    sum += std::visit([&](const auto &x) -> long {
      using T = std::decay_t<decltype(x)>;
      if constexpr (std::is_same_v<T, Rec<I>>) return weigh(x);
      else if constexpr (std::is_same_v<T, std::string>) return static_cast<long>(x.size());
      else return static_cast<long>(x);
    }, v);
  for (const auto &kv : by_name) sum += static_cast<long>(kv.second.size()) * kv.first.size();
  for (const auto &kv : by_id) sum += kv.second->id;
  return sum + std::get<0>(rows.front());
}

template <int... Is> long all(std::integer_sequence<int, Is...>) { return (work<Is>() + ...); }

int main() {
  std::printf("%ld\n", all(std::make_integer_sequence<int, 24>{}));
  return 0;
}
EOF_CXX
}
