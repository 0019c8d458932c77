// Reference attention (see include/kiln/ops/attention.h), materialising the scores in double.
//
// For each batch b and head h, with S[i][j] = scale * q_i . k_j over the keys j a query i may
// see (j <= i when causal, every j otherwise):
//   forward:  lse_i = log sum_j exp(S_ij),  P_ij = exp(S_ij - lse_i),  o_i = sum_j P_ij v_j
//   backward: dv_j = sum_i P_ij dout_i
//             dP_ij = dout_i . v_j,  dS_ij = P_ij (dP_ij - sum_j' P_ij' dP_ij')
//             dq_i = scale sum_j dS_ij k_j,  dk_j = scale sum_i dS_ij q_i
// Masked pairs have P_ij = 0 and take no part. The backward recomputes P in double from q and k
// rather than reading the forward's o and lse (f32 roundings of the same quantities), so it is
// exactly the derivative of the forward above.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/ref/ref.h"

namespace kiln::ops::ref {
namespace {

double scale_of(float scale, int64_t D) {
  return scale != 0.0f ? static_cast<double>(scale) : 1.0 / std::sqrt(static_cast<double>(D));
}

// The keys query i sees: [0, i] when causal, [0, T) otherwise.
int64_t keys_seen(int64_t i, int64_t T, bool causal) {
  return causal ? i + 1 : T;
}

// P (T x T, row-major, zero where masked) and lse (T) of batch b, head h.
void probabilities(const TensorView& q, const TensorView& k, int64_t b, int64_t h, double scale,
                   bool causal, std::vector<double>& P, std::vector<double>& lse) {
  const int64_t T = q.size(1);
  const int64_t D = q.size(3);
  P.assign(static_cast<size_t>(T * T), 0.0);
  lse.assign(static_cast<size_t>(T), 0.0);
  for (int64_t i = 0; i < T; ++i) {
    double* row = &P[static_cast<size_t>(i * T)];
    const int64_t seen = keys_seen(i, T, causal);
    double max_score = -INFINITY;
    for (int64_t j = 0; j < seen; ++j) {
      double s = 0;
      for (int64_t d = 0; d < D; ++d)
        s += static_cast<double>(at(q, b, i, h, d)) * at(k, b, j, h, d);
      row[j] = scale * s;
      max_score = std::max(max_score, row[j]);
    }
    double sum = 0;
    for (int64_t j = 0; j < seen; ++j)
      sum += std::exp(row[j] - max_score);
    lse[static_cast<size_t>(i)] = max_score + std::log(sum);
    for (int64_t j = 0; j < seen; ++j)
      row[j] = std::exp(row[j] - lse[static_cast<size_t>(i)]);
  }
}

}  // namespace

Status attention_forward(const AttentionParams& p) {
  const int64_t B = p.q.size(0);
  const int64_t T = p.q.size(1);
  const int64_t H = p.q.size(2);
  const int64_t D = p.q.size(3);
  const double scale = scale_of(p.scale, D);
  std::vector<double> P;
  std::vector<double> lse;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      probabilities(p.q, p.k, b, h, scale, p.causal, P, lse);
      for (int64_t i = 0; i < T; ++i) {
        at(p.lse, b, h, i) = static_cast<float>(lse[static_cast<size_t>(i)]);
        for (int64_t d = 0; d < D; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < keys_seen(i, T, p.causal); ++j)
            acc += P[static_cast<size_t>(i * T + j)] * at(p.v, b, j, h, d);
          at(p.o, b, i, h, d) = static_cast<float>(acc);
        }
      }
    }
  }
  return Status();
}

Status attention_backward(const AttentionBackwardParams& p) {
  const int64_t B = p.q.size(0);
  const int64_t T = p.q.size(1);
  const int64_t H = p.q.size(2);
  const int64_t D = p.q.size(3);
  const double scale = scale_of(p.scale, D);
  std::vector<double> P;
  std::vector<double> lse;
  std::vector<double> dS(static_cast<size_t>(T * T));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      probabilities(p.q, p.k, b, h, scale, p.causal, P, lse);
      // dS_ij = P_ij (dP_ij - sum_j' P_ij' dP_ij'), zero where masked.
      for (int64_t i = 0; i < T; ++i) {
        const int64_t seen = keys_seen(i, T, p.causal);
        double* ds_row = &dS[static_cast<size_t>(i * T)];
        double row_dot = 0;
        for (int64_t j = 0; j < T; ++j) {
          double dp = 0;  // dP_ij; masked pairs keep 0 and have P_ij = 0
          if (j < seen) {
            for (int64_t d = 0; d < D; ++d)
              dp += static_cast<double>(at(p.dout, b, i, h, d)) * at(p.v, b, j, h, d);
          }
          ds_row[j] = dp;
          row_dot += P[static_cast<size_t>(i * T + j)] * dp;
        }
        for (int64_t j = 0; j < T; ++j)
          ds_row[j] = P[static_cast<size_t>(i * T + j)] * (ds_row[j] - row_dot);
      }
      for (int64_t i = 0; i < T; ++i) {
        for (int64_t d = 0; d < D; ++d) {
          double dq = 0;
          double dk = 0;
          double dv = 0;
          for (int64_t j = 0; j < T; ++j) {
            dq += dS[static_cast<size_t>(i * T + j)] * at(p.k, b, j, h, d);
            // Row i of dk and dv gathers over the queries j that see key i.
            dk += dS[static_cast<size_t>(j * T + i)] * at(p.q, b, j, h, d);
            dv += P[static_cast<size_t>(j * T + i)] * at(p.dout, b, j, h, d);
          }
          at(p.dq, b, i, h, d) = static_cast<float>(scale * dq);
          at(p.dk, b, i, h, d) = static_cast<float>(scale * dk);
          at(p.dv, b, i, h, d) = static_cast<float>(dv);
        }
      }
    }
  }
  return Status();
}

}  // namespace kiln::ops::ref
