#pragma once
// RULER-style retrieval tasks generated at a requested length, so that any model can be measured at
// long context without data files. The text matches tools/train/tasks.py (ruler_doc), which trains
// the retrieval model on other random values: an intro line, a haystack with the needle lines placed at
// random depths, and a question whose answer the greedy continuation must start with.
#include <cstdint>
#include <string>
#include <vector>

#include "eval/retrieval.h"
#include "tokenizer/tokenizer.h"

namespace fasa {

// The lookups the retrieval model is trained on ("all"): passkey: one 5-digit key; multikey: 6 records
// "Record K: V.", one asked; multivalue: three numbers of one name among others, all asked (scored as
// the share of them answered); multineedle: four names' favourite numbers, one asked; vartrack: a chain
// VAR C = VAR B = VAR A = value beside a distractor chain, the whole chain asked.
const std::vector<std::string>& generated_task_kinds();
// With RULER's other kinds ("every"): word and uuid: one name's made-up word or UUID among look-alikes'
// lines; multiquery: 8 records, 3 asked at once; cwe: the ten words that fill 30 % of a list (the rest
// once each); fwe: the three most frequent of coded words drawn by Zipf's law (alpha 2). cwe and fwe
// aggregate over the whole context: their context is the list, not a haystack. Not in either list, as it
// needs a file: qa (RULER's QA over documents): dictionary entries from TaskGenOptions::qa_entries_file,
// one asked by a quote of its definition ("Which word does the dictionary above define as "..."?"), the
// answer its headword.
// (Both read the rows of task_gen.cpp's kTaskKinds, in their order.)
const std::vector<std::string>& every_task_kind();
// "all" and "every" as the lists above; other lists as they are.
std::vector<std::string> expand_task_kinds(const std::vector<std::string>& kinds);

struct TaskGenOptions {
  std::vector<std::string> kinds = generated_task_kinds();
  std::vector<int64_t> lengths = {4096};  // prompt + answer tokens, at most
  int n = 20;                             // tasks per kind and length
  uint64_t seed = 0;
  std::string haystack_file;              // text to hide the needles in; empty: RULER's noise sentences
  bool distractors = false;               // instead: look-alike needles (same template, other keys and values)
  std::string qa_entries_file;            // kind qa: dictionary entries in GCIDE's format
};

// Tasks of type "KIND@LENGTH". Throws fasa::Error on an unknown kind, a length too short for the
// needles and question, or an unreadable or empty haystack or qa dictionary file.
std::vector<RetrievalTask> generate_retrieval_tasks(const Tokenizer& tok, const TaskGenOptions& o);

}  // namespace fasa
