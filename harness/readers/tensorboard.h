// Scalars from TensorBoard event files (TFRecord framing around tensorflow.Event protobufs), read
// without TensorFlow or a protobuf library. What is promised:
// - scalars are `simple_value` (float32) and 1-element tensors (`add_scalar(new_style=True)`):
//   DT_FLOAT, DT_DOUBLE, DT_HALF, DT_BFLOAT16, DT_INT32 (and narrower ints), DT_INT64, from
//   tensor_content or the typed value fields, a shape of rank 0 or all dims 1; converted to double.
//   Other values (images, histograms, text, longer tensors) are passed over silently, unless
//   their tag is asked for: then a warning says so;
// - an event without a step is step 0 (proto3 leaves 0 out);
// - the same (step, tag) twice: the last wins, within a file and across files read in name
//   order; one warning per file counts them. (A writer restarted with TensorBoard's "purge"
//   semantics, which drops later steps, is out of scope.)
// - given one launch's wall-clock window, events whose wall_time lies outside it are left out
//   (another launch's, in a folder both wrote into), with one warning per file counting them;
// - every CRC is checked: a mismatch (length or data) throws MetricsError naming the file, the
//   record (counted from 1) and its byte offset, as does a record whose protobuf is malformed;
// - a truncated final record (a writer still running) gives a warning; what came before is kept;
// - nothing in the bytes makes them crash; protobuf nesting is fixed (Event > Summary > Value >
//   TensorProto > TensorShapeProto > Dim) and unknown fields are skipped without descending.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "readers/metric_series.h"

namespace meshtest {

// TB tag -> metric name: loss_metrics/global_avg_loss -> loss, grad_norm -> grad_norm (torchtitan).
const std::map<std::string, std::string>& default_tensorboard_tags();

// Scalars from TensorBoard event files. `dir` is a folder of event files, or a folder of run
// folders (torchtitan's tb/<YYYYmmdd-HHMM>/): then the latest run folder by name is read (that
// name sorts by time; names are unique in a folder, so there are no ties: two runs started in
// the same minute share one folder). Every events.out.tfevents.* file in the chosen folder is
// read in name order, which is time order, so a later file's values win.
// `window`: when one launch wrote them (seconds since the epoch). Only events whose wall_time
// lies inside it are kept, so a launch that shares its folder with another (torchtitan's resume
// within the minute it started) reads what it wrote; an event without a wall_time is kept. The
// run folder is then the latest holding an event written inside the window (the latest when
// none does). Without a window every event counts.
// `tags` maps TB tag -> metric name; only mapped tags are kept. An EMPTY map keeps every scalar
// tag under its own name.
// Throws MetricsError when `dir` cannot be read or the chosen folder holds no event files
// (e.g. torchtitan's rank_<r>/ or replica_<id>/ subfolders: pass one of them as `dir`).
MetricSeries read_tensorboard_scalars(const std::string& dir, const std::map<std::string, std::string>& tags,
                                      std::vector<std::string>* warnings,
                                      const std::optional<TimeWindow>& window = std::nullopt);

// The folder read_tensorboard_scalars reads for `dir` (`dir` itself, or a run folder).
std::string tensorboard_run_folder(const std::string& dir, const std::optional<TimeWindow>& window = std::nullopt);

// Fuzzable core: parse one event file's bytes; `file` is for messages.
MetricSeries parse_tfrecord_events(const uint8_t* data, size_t size, const std::string& file,
                                   const std::map<std::string, std::string>& tags, std::vector<std::string>* warnings);

// CRC32C (Castagnoli) and TFRecord's masking of it; public for tests and writers of test files.
uint32_t crc32c(const uint8_t* data, size_t size);
inline uint32_t mask_crc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

}  // namespace meshtest
