#!/usr/bin/env bash
# Runs the command blocks of README.md as a reader would, and writes its C++
# snippets out as a CMake project (tests/readme_snippets.sh builds that).
#
# Every command block (an indented block, or a fence marked sh / bash / shell
# or unmarked) carries a mark on the line before it, an HTML comment that the
# rendered page hides:
#   <!-- check-readme: run fast -->    run always (ctest's readme_commands_fast)
#   <!-- check-readme: run -->         run by --all (minutes: trains, prepares data)
#   <!-- check-readme: skip REASON --> never run; REASON says why (hours, several machines, output)
# A run mark may add `exit=N` (the block must end with status N, for the
# error examples) and, last, `expect=TEXT` (its output must contain TEXT).
# A block without a mark fails the check, so a new example is never left out.
# C++ blocks (```cpp) are complete programs (with main) or fragments; a
# fragment marked `<!-- check-readme: fragment NAME -->` is compiled after the
# declarations of tests/readme_snippets/NAME.inc, which give it the names it
# uses. ```cmake blocks are the snippet project's own CMake lines.
#
# Each block runs in a directory of its own under a temporary one, with bash -e,
# PATH starting with a `paxcc` that runs the build's (train.num_train_steps set
# to $PAX_README_STEPS, default 2, on every training run), PAX_DATA_DIR shared
# by the blocks, and corpus.txt, a.txt and b.txt (the KJV's verses) beside it.
#
# usage: scripts/check-readme.sh [--all] [--paxcc PATH] [--readme FILE]
#        scripts/check-readme.sh --list                 the blocks and their marks
#        scripts/check-readme.sh --cpp-project DIR      write the C++ snippets as a project
# PATH defaults to $PAXCC, else build/tools/paxcc/paxcc.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
readme=$root/README.md
paxcc=${PAXCC:-$root/build/tools/paxcc/paxcc}
action=fast
project_dir=
while [[ $# -gt 0 ]]; do
  case $1 in
    --all) action=all ;;
    --list) action=list ;;
    --cpp-project) action=cpp && project_dir=${2:?--cpp-project needs a directory} && shift ;;
    --paxcc) paxcc=${2:?--paxcc needs a path} && shift ;;
    --readme) readme=${2:?--readme needs a file} && shift ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//' && exit 0 ;;
    *)
      echo "check-readme: unknown argument '$1'" \
        "(valid: --all, --list, --cpp-project DIR, --paxcc PATH, --readme FILE)" >&2
      exit 2
      ;;
  esac
  shift
done
[[ -f $readme ]] || { echo "check-readme: no README at $readme" >&2; exit 2; }
readme=$(cd "$(dirname "$readme")" && pwd)/$(basename "$readme")

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The blocks: $work/blocks/index holds LINE<TAB>KIND<TAB>LANG<TAB>MARK per block
# (LINE: its first line in the README; KIND: indent or fence; "-" for no
# LANG or no MARK) and
# $work/blocks/LINE its text, the indentation removed.
mkdir -p "$work/blocks"
awk -v dir="$work/blocks" -v name="$(basename "$readme")" '
  function start_block(kind, lang, line) {
    file = dir "/" line
    printf "" > file
    # "-" for an empty field: read splits on runs of tabs.
    printf "%d\t%s\t%s\t%s\n", line, kind, (lang == "" ? "-" : lang), (mark == "" ? "-" : mark) > (dir "/index")
    mark = ""; mark_line = 0
  }
  function end_block() { close(file); in_indent = 0; blanks = 0 }
  function no_block_after_mark() {
    printf "%s:%d: a check-readme mark with no block after it\n", name, mark_line
    bad = 1; mark_line = 0; mark = ""
  }
  BEGIN { prev_blank = 1 }
  {
    line = $0
    if (in_fence) {
      if (line ~ /^```[ \t]*$/) { close(file); in_fence = 0; prev_blank = 0 }
      else print line >> file
      next
    }
    if (in_indent) {
      if (line ~ /^[ \t]*$/) { blanks++; next }
      if (line ~ /^    /) {
        for (; blanks > 0; blanks--) print "" >> file
        print substr(line, 5) >> file
        next
      }
      end_block(); prev_blank = 0  # a blank line ended it; this line starts a paragraph
    }
    if (line ~ /^<!-- check-readme:.*-->[ \t]*$/) {
      if (mark_line) no_block_after_mark()
      mark = line
      sub(/^<!-- check-readme:[ \t]*/, "", mark); sub(/[ \t]*-->[ \t]*$/, "", mark)
      mark_line = NR; prev_blank = 1  # a block may follow at once, as after any HTML block
      next
    }
    if (line ~ /^```/) {
      lang = substr(line, 4); gsub(/[ \t]/, "", lang)
      start_block("fence", lang, NR + 1); in_fence = 1
      next
    }
    if (line ~ /^    / && prev_blank) {
      start_block("indent", "", NR); in_indent = 1
      print substr(line, 5) >> file
      next
    }
    if (line ~ /^[ \t]*$/) { prev_blank = 1; next }
    if (mark_line) no_block_after_mark()
    prev_blank = 0
  }
  END {
    if (in_fence) { printf "%s: the fence opened before line %d is never closed\n", name, NR; bad = 1 }
    if (mark_line) no_block_after_mark()
    exit bad
  }' "$readme" || exit 1
touch "$work/blocks/index"

is_command_block() {  # KIND LANG
  [[ $1 == indent ]] || [[ $2 == - || $2 == sh || $2 == bash || $2 == shell ]]
}

if [[ $action == list ]]; then
  while IFS=$'\t' read -r line kind lang mark; do
    [[ $mark == - ]] && mark=
    printf '%s:%-5s %-6s %-6s %s | %s\n' "$(basename "$readme")" "$line" "$kind" "${lang:--}" "${mark:-(no mark)}" \
      "$(head -n 1 "$work/blocks/$line")"
  done <"$work/blocks/index"
  exit 0
fi

# --cpp-project: one source per ```cpp block (fragments wrapped in a function
# after their context's declarations, #line pointing back at the README), one
# executable my_app holding them and the first complete program, the ```cmake
# blocks as its CMake lines, and programs.txt naming what to run.
if [[ $action == cpp ]]; then
  mkdir -p "$project_dir" || exit 2
  project_dir=$(cd "$project_dir" && pwd)
  contexts=$root/tests/readme_snippets
  sources=() programs=() cmake_lines="" failures=0
  while IFS=$'\t' read -r line kind lang mark; do
    [[ $mark == - ]] && mark=
    text=$work/blocks/$line
    if [[ $lang == cmake ]]; then
      cmake_lines+=$(printf '# %s:%s\n%s' "$(basename "$readme")" "$line" "$(cat "$text")")$'\n'
      continue
    fi
    [[ $lang == cpp || $lang == c++ ]] || continue
    src=$project_dir/snippet_$line.cc
    if grep -qE '^int main\(' "$text"; then
      if [[ -n $mark ]]; then
        echo "$(basename "$readme"):$line: a complete program takes no mark, got '$mark'"
        failures=$((failures + 1))
      fi
      { printf '#line %d "%s"\n' "$line" "$readme"; cat "$text"; } >"$src"
      if [[ ${#programs[@]} -eq 0 ]]; then
        sources+=("$src") && programs+=(my_app)
      else
        programs+=("readme_program_$line")
      fi
      continue
    fi
    context=
    if [[ -n $mark ]]; then
      if [[ $mark =~ ^fragment\ ([A-Za-z0-9_]+)$ ]]; then
        context=${BASH_REMATCH[1]}
        [[ -f $contexts/$context.inc ]] || {
          valid=$(cd "$contexts" && ls -- *.inc 2>/dev/null | sed 's/\.inc$//' | tr '\n' ' ')
          echo "$(basename "$readme"):$line: no context '$context' (valid: $valid)"
          failures=$((failures + 1))
          continue
        }
      else
        echo "$(basename "$readme"):$line: a C++ block's mark is 'fragment NAME', got '$mark'"
        failures=$((failures + 1))
        continue
      fi
    fi
    {
      echo '#include <iostream>'
      echo '#include "pax/pax.h"'
      echo 'using namespace pax;'
      echo "namespace readme_snippet_$line {"
      echo '[[maybe_unused]] void fragment() {'
      [[ -z $context ]] || echo "#include \"$context.inc\""
      echo '{'
      printf '#line %d "%s"\n' "$line" "$readme"
      cat "$text"
      echo '}'
      echo '}'
      echo '}'
    } >"$src"
    sources+=("$src")
  done <"$work/blocks/index"
  [[ $failures -eq 0 ]] || exit 1
  if [[ ${#programs[@]} -eq 0 ]]; then
    echo 'int main() {}' >"$project_dir/main.cc" && sources+=("$project_dir/main.cc") && programs+=(my_app)
  fi
  {
    echo '# Generated by scripts/check-readme.sh --cpp-project from the README.'
    echo 'cmake_minimum_required(VERSION 3.25)'
    echo 'project(readme_snippets LANGUAGES CXX)'
    echo "add_executable(my_app ${sources[*]})"
    echo "target_include_directories(my_app PRIVATE $contexts)"
    for p in "${programs[@]:1}"; do
      echo "add_executable($p $project_dir/snippet_${p#readme_program_}.cc)"
      echo "target_link_libraries($p PRIVATE pax::pax)"
    done
    printf '%s' "$cmake_lines"
  } >"$project_dir/CMakeLists.txt"
  printf '%s\n' "${programs[@]}" >"$project_dir/programs.txt"
  grep -q 'pax::pax' "$project_dir/CMakeLists.txt" || {
    echo "$(basename "$readme"): no \`\`\`cmake block links my_app to pax::pax"
    exit 1
  }
  echo "check-readme: wrote ${#sources[@]} sources and ${#programs[@]} program(s) into $project_dir"
  exit 0
fi

# Running the command blocks.
[[ -x $paxcc ]] || { echo "check-readme: no paxcc at $paxcc (build it, or pass --paxcc PATH)" >&2; exit 2; }
paxcc=$(cd "$(dirname "$paxcc")" && pwd)/$(basename "$paxcc")
steps=${PAX_README_STEPS:-2}
block_timeout=${PAX_README_BLOCK_TIMEOUT:-900}
export PAX_DATA_DIR=${PAX_DATA_DIR:-$work/data}
export PAX_PEAK_FLOPS=${PAX_PEAK_FLOPS:-1e11}  # skips timing the peak: it is printed, not checked
# mpirun refuses to run as root without these (the README says so too).
if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
mkdir -p "$work/bin"
cat >"$work/bin/paxcc" <<EOF
#!/usr/bin/env bash
# The build's paxcc; a training run stops after $steps steps.
mode=train runs=0 prev=
for a in "\$@"; do
  case \$a in
    --exp | --exp=* | --config | --config=*) runs=1 ;;
    --mode=*) mode=\${a#--mode=} ;;
  esac
  [[ \$prev == --mode ]] && mode=\$a
  prev=\$a
done
if [[ \$runs -eq 1 && \$mode == train ]]; then
  exec "$paxcc" "\$@" --set train.num_train_steps=$steps
fi
exec "$paxcc" "\$@"
EOF
chmod +x "$work/bin/paxcc"

# corpus.txt, a.txt and b.txt for the blocks that name text files: the KJV's
# verses as paxcc prepares them (into $PAX_DATA_DIR, once).
fixtures_ready=0
make_fixtures() {
  [[ $fixtures_ready -eq 1 ]] && return 0
  local kjv=$PAX_DATA_DIR/kjv/kjv.txt
  if [[ ! -f $kjv ]]; then
    "$paxcc" --exp=lm.KjvTransformerTiny "--job_log_dir=$work/fixture_run" --set train.num_train_steps=1 \
      >"$work/fixture.log" 2>&1 || { cat "$work/fixture.log"; return 1; }
  fi
  mkdir -p "$work/fixtures"
  cp "$kjv" "$work/fixtures/corpus.txt"
  local half=$(($(wc -l <"$kjv") / 2))
  head -n "$half" "$kjv" >"$work/fixtures/a.txt"
  tail -n "+$((half + 1))" "$kjv" >"$work/fixtures/b.txt"
  fixtures_ready=1
}

name=$(basename "$readme")
ran=0 failed=0 skipped=0 unmarked=0 later=0
while IFS=$'\t' read -r line kind lang mark; do
  [[ $mark == - ]] && mark=
  is_command_block "$kind" "$lang" || continue
  first=$(head -n 1 "$work/blocks/$line")
  if [[ -z $mark ]]; then
    echo "FAIL $name:$line: a command block without a check-readme mark ($first); mark it run, run fast or skip REASON"
    unmarked=$((unmarked + 1))
    continue
  fi
  read -r verb rest <<<"$mark"
  if [[ $verb == skip ]]; then
    if [[ -z $rest ]]; then
      echo "FAIL $name:$line: a skip mark needs a reason"
      unmarked=$((unmarked + 1))
    else
      echo "skip $name:$line ($first): $rest"
      skipped=$((skipped + 1))
    fi
    continue
  fi
  if [[ $verb != run ]]; then
    echo "FAIL $name:$line: unknown mark '$mark' (valid: run [fast] [exit=N] [expect=TEXT], skip REASON)"
    unmarked=$((unmarked + 1))
    continue
  fi
  fast=0 want=0 expect=
  if [[ $rest == *expect=* ]]; then
    expect=${rest#*expect=}
    rest=${rest%%expect=*}
  fi
  for word in $rest; do
    case $word in
      fast) fast=1 ;;
      exit=[0-9]*) want=${word#exit=} ;;
      *)
        echo "FAIL $name:$line: unknown word '$word' in the mark (valid: fast, exit=N, expect=TEXT)"
        unmarked=$((unmarked + 1))
        continue 2
        ;;
    esac
  done
  if [[ $action == fast && $fast -eq 0 ]]; then
    later=$((later + 1))
    continue
  fi
  dir=$work/run_$line
  mkdir -p "$dir"
  if [[ $fast -eq 0 ]]; then
    make_fixtures || { echo "FAIL: preparing the text files for the blocks failed"; exit 1; }
    cp "$work/fixtures/"*.txt "$dir/"
  fi
  start=$SECONDS
  (cd "$dir" && PATH="$work/bin:$PATH" timeout "$block_timeout" bash -e -o pipefail "$work/blocks/$line") \
    </dev/null >"$dir.log" 2>&1
  rc=$?
  took=$((SECONDS - start))
  if [[ $rc -ne $want ]]; then
    why="exit $rc, want $want"
    [[ $rc -eq 124 ]] && why+=" (timed out after $block_timeout s)"
    echo "FAIL $name:$line ($first): $why; the end of its output:"
    tail -n 25 "$dir.log" | sed 's/^/    /'
    failed=$((failed + 1))
  elif [[ -n $expect ]] && ! grep -qF -- "$expect" "$dir.log"; then
    echo "FAIL $name:$line ($first): the output does not contain '$expect'; it ends:"
    tail -n 25 "$dir.log" | sed 's/^/    /'
    failed=$((failed + 1))
  else
    echo "ok   $name:$line ($first) in ${took} s"
  fi
  ran=$((ran + 1))
done <"$work/blocks/index"

summary="check-readme: $ran blocks ran, $failed failed, $skipped skipped with a reason"
[[ $action == fast ]] && summary+=", $later left to --all"
[[ $unmarked -gt 0 ]] && summary+=", $unmarked with a missing or bad mark"
echo "$summary"
[[ $failed -eq 0 && $unmarked -eq 0 ]]
