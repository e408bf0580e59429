// Megatron-LM's golden values (readers/golden_values.h) to and from meshtest's golden files
// (readers/golden_curve.h): `meshtest golden import megatron` and `golden export --format
// megatron`. docs/matrix.md#golden-files, docs/foreign-trainers.md#golden-values-megatrons-way.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace meshtest {

// The metrics both sides know, Megatron's TensorBoard name -> meshtest's curve metric:
// "lm loss" -> loss, "num-zeros" -> num_zeros, "grad-norm" -> grad_norm, "lm loss validation" ->
// validation_loss.
const std::vector<std::pair<std::string, std::string>>& megatron_metric_names();

// `meshtest golden import megatron FILE... [--out DIR]`: for each file, one golden per metric
// meshtest judges, <DIR>/<file stem>.<metric>.txt (DIR: the file's own folder when ""), its
// values as the file has them ("nan" as nan) under `#` lines that say where they came from; the
// file's other metrics are listed as skipped. Every file is read and checked before any is
// written. Prints a line per file written or skipped; throws std::runtime_error with why.
int import_megatron_golden(const std::vector<std::string>& files, const std::string& out_dir);

// `meshtest golden export ID --format megatron [--phase P]`: the finished case's phase as
// Megatron's golden values on stdout: every metric of megatron_metric_names() it reported, each
// value rounded to 5 decimals (Megatron's round(x, 5)), start, end and step_interval as Megatron
// infers them. A curve whose steps leave gaps in that grid is written, and said on stderr.
int export_megatron_golden(const std::string& dir, const std::string& id, const std::string& phase);

}  // namespace meshtest
