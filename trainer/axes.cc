#include "trainer/axes.h"

#include <cstdio>

namespace psar {

const char* const kAxesCsvHeader =
    "rank,pp,tp,dp,step,tp_allreduces,tp_floats,tp_floats_formula,tp_bytes_sent,tp_s,"
    "pp_floats_sent,pp_floats_formula,pp_bytes_sent,pp_gather_bytes_sent,pp_s,dp_floats,"
    "dp_floats_formula,dp_bytes_sent,dp_s,tp_gather_floats,tp_gather_floats_formula,"
    "params_bytes,grads_bytes,optimizer_bytes,gathered_bytes\n";
const char* const kTpCsvHeader =
    "rank,tp,tp_rank,step,compute_s,tp_comm_s,g_forward,f_backward,allreduces,allreduce_floats,"
    "all_gathers,all_gather_floats,tp_bytes_sent,tp_messages\n";

std::string axes_csv_row(int rank, const GridCoord& c, const AxisRow& r) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "%d,%d,%d,%d,%ld,%ld,%ld,%ld,%ld,%.9g,%ld,%ld,%ld,%ld,%.9g,%ld,%ld,%ld,%.9g,%ld,%ld,%ld,%ld,"
                "%ld,%ld\n",
                rank, c.pp, c.tp, c.dp, static_cast<long>(r.step),
                static_cast<long>(r.tp.allreduces), static_cast<long>(r.tp.allreduce_floats),
                static_cast<long>(r.tp_floats_formula), static_cast<long>(r.tp_bytes_sent),
                r.tp.seconds, static_cast<long>(r.pp_floats_sent),
                static_cast<long>(r.pp_floats_formula), static_cast<long>(r.pp_bytes_sent),
                static_cast<long>(r.pp_gather_bytes_sent), r.pp_s, static_cast<long>(r.dp_floats),
                static_cast<long>(r.dp_floats_formula), static_cast<long>(r.dp_bytes_sent), r.dp_s,
                static_cast<long>(r.tp.all_gather_floats),
                static_cast<long>(r.tp_gather_floats_formula), static_cast<long>(r.params_bytes),
                static_cast<long>(r.grads_bytes), static_cast<long>(r.optimizer_bytes),
                static_cast<long>(r.gathered_bytes));
  return buf;
}

std::string tp_csv_row(int rank, const GridShape& shape, const GridCoord& c, const AxisRow& r) {
  char buf[512];
  std::snprintf(buf, sizeof buf, "%d,%d,%d,%ld,%.9g,%.9g,%ld,%ld,%ld,%ld,%ld,%ld,%ld,%ld\n", rank,
                shape.tp, c.tp, static_cast<long>(r.step), r.compute_s, r.tp.seconds,
                static_cast<long>(r.tp.g_forward), static_cast<long>(r.tp.f_backward),
                static_cast<long>(r.tp.allreduces), static_cast<long>(r.tp.allreduce_floats),
                static_cast<long>(r.tp.all_gathers), static_cast<long>(r.tp.all_gather_floats),
                static_cast<long>(r.tp_bytes_sent), static_cast<long>(r.tp_messages));
  return buf;
}

}  // namespace psar
