#include "trainer/axes.h"

#include <cstdio>

#include "core/csv.h"

namespace psar {

namespace {

std::string gathered(Comm& workers, const std::string& mine) {
  std::string out;
  for (const auto& part : workers.allgather_bytes(std::as_bytes(std::span<const char>(mine))))
    out.append(reinterpret_cast<const char*>(part.data()), part.size());
  return out;
}

}  // namespace

void write_axes(Comm& workers, const GridShape& shape, const GridCoord& c,
                const std::vector<AxisRow>& rows, const std::string& out_dir) {
  std::string axes, tp;
  for (const AxisRow& r : rows) {
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "%d,%d,%d,%d,%ld,%ld,%ld,%ld,%ld,%.9g,%ld,%ld,%ld,%ld,%.9g,%ld,%ld,%ld,%.9g\n",
                  workers.rank(), c.pp, c.tp, c.dp, static_cast<long>(r.step),
                  static_cast<long>(r.tp.allreduces), static_cast<long>(r.tp.allreduce_floats),
                  static_cast<long>(r.tp_floats_formula), static_cast<long>(r.tp_bytes_sent),
                  r.tp.seconds, static_cast<long>(r.pp_floats_sent),
                  static_cast<long>(r.pp_floats_formula), static_cast<long>(r.pp_bytes_sent),
                  static_cast<long>(r.pp_gather_bytes_sent), r.pp_s,
                  static_cast<long>(r.dp_floats), static_cast<long>(r.dp_floats_formula),
                  static_cast<long>(r.dp_bytes_sent), r.dp_s);
    axes += buf;
    std::snprintf(buf, sizeof buf, "%d,%d,%d,%ld,%.9g,%.9g,%ld,%ld,%ld,%ld,%ld,%ld,%ld,%ld\n",
                  workers.rank(), shape.tp, c.tp, static_cast<long>(r.step), r.compute_s,
                  r.tp.seconds, static_cast<long>(r.tp.g_forward),
                  static_cast<long>(r.tp.f_backward), static_cast<long>(r.tp.allreduces),
                  static_cast<long>(r.tp.allreduce_floats), static_cast<long>(r.tp.all_gathers),
                  static_cast<long>(r.tp.all_gather_floats), static_cast<long>(r.tp_bytes_sent),
                  static_cast<long>(r.tp_messages));
    tp += buf;
  }
  const std::string all_axes = gathered(workers, axes);
  const std::string all_tp = shape.tp > 1 ? gathered(workers, tp) : std::string();
  if (workers.rank() != 0 || out_dir.empty()) return;
  write_file_atomic(out_dir + "/axes.csv",
                    "rank,pp,tp,dp,step,tp_allreduces,tp_floats,tp_floats_formula,tp_bytes_sent,"
                    "tp_s,pp_floats_sent,pp_floats_formula,pp_bytes_sent,pp_gather_bytes_sent,"
                    "pp_s,dp_floats,dp_floats_formula,dp_bytes_sent,dp_s\n" +
                        all_axes);
  if (shape.tp > 1)
    write_file_atomic(out_dir + "/tp.csv",
                      "rank,tp,tp_rank,step,compute_s,tp_comm_s,g_forward,f_backward,allreduces,"
                      "allreduce_floats,all_gathers,all_gather_floats,tp_bytes_sent,"
                      "tp_messages\n" +
                          all_tp);
}

}  // namespace psar
