/* summary.c — the result line and summary.json. The line is what scripts grep for, so its keys
 * only ever get added to, never renamed. */
#include "config.h"

#include "src/obs/summary.h"
#include "src/obs/outfile.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "src/check.h"
#include "src/obs/json_out.h"

/* A number of the result line: "none" where there is none (no validation took place). */
static void put(FILE *f, const char *key, const char *fmt, double v)
{
  fprintf(f, " %s=", key);
  if (isfinite(v)) fprintf(f, fmt, v);
  else fputs("none", f);
}

void summary_print_result(FILE *f, const train_result_t *r)
{
  fprintf(f, "result: steps=%ld", r->steps);
  put(f, "images_per_s", "%.2f", r->images_per_s);
  put(f, "train_loss", "%.6f", r->train_loss);
  put(f, "val_loss", "%.6f", r->val_loss);
  put(f, "val_miou", "%.4f", r->val_miou);
  put(f, "val_acc", "%.4f", r->val_acc);
  put(f, "initial_loss", "%.6f", r->initial_loss);
  fprintf(f, " epochs=%ld world=%d skipped_steps=%ld wall_s=%.1f peak_mib=", r->epochs, r->world,
          r->skipped_steps, r->wall_s);
  for (int i = 0; i < r->world && i < SHMDDP_MAX_RANKS; i++)
    fprintf(f, "%s%.0f", i ? "," : "", r->peak_mib[i]);
  if (isfinite(r->val_miou)) fprintf(f, " miou_classes=%d/%d", r->miou_classes, r->classes);
  fputc('\n', f);
  fflush(f);
}

void summary_print_classes(FILE *f, const train_result_t *r)
{
  if (!isfinite(r->val_miou)) return;
  fprintf(f, "val IoU per class (mIoU over %d of %d classes%s):", r->miou_classes, r->classes,
          r->miou_classes < r->classes ? ", the others absent from the validation labels" : "");
  for (int c = 0; c < r->classes && c < SUMMARY_MAX_CLASSES; c++) {
    fprintf(f, "%s %d ", c ? "," : "", c);
    if (isfinite(r->class_iou[c])) fprintf(f, "%.4f", r->class_iou[c]);
    else fputs("absent", f);
  }
  fputc('\n', f);
}

void summary_print_labels(FILE *f, const train_result_t *r)
{
  if (!r->labels_counted) return;
  static const char *const split[2] = {"train", "val"};
  for (int s = 0; s < 2; s++) {
    double total = r->ignored_pixels[s];
    for (int c = 0; c < r->classes && c < SUMMARY_MAX_CLASSES; c++) total += r->label_pixels[s][c];
    fprintf(f, "  %s labels (share of pixels):", split[s]);
    for (int c = 0; c < r->classes && c < SUMMARY_MAX_CLASSES; c++)
      fprintf(f, "%s %d %.1f%%", c ? "," : "", c,
              total > 0 ? 100.0 * r->label_pixels[s][c] / total : 0.0);
    fprintf(f, ", ignored %.1f%%\n", total > 0 ? 100.0 * r->ignored_pixels[s] / total : 0.0);
  }
}

static void json_numbers(FILE *f, const double *v, int n)
{
  fputc('[', f);
  for (int i = 0; i < n; i++) {
    if (i) fputs(", ", f);
    json_number(f, v[i]);
  }
  fputc(']', f);
}

int summary_write_json(const char *dir, const train_result_t *r, const char *config,
                       const char *memory_json, char *err, size_t errlen)
{
  char path[2048], tmp[2100];
  snprintf(path, sizeof path, "%s/summary.json", dir);
  FILE *f = outfile_fopen_temp(path, tmp, sizeof tmp);
  if (!f) {
    return check_fail(err, errlen, "%s: cannot create: %s", tmp, strerror(errno));
  }
  fprintf(f, "{\n  \"steps\": %ld,\n  \"epochs\": %ld,\n  \"world\": %d,\n", r->steps, r->epochs,
          r->world);
  const struct {
    const char *key;
    double v;
  } nums[] = {{"images_per_s", r->images_per_s}, {"train_loss", r->train_loss},
              {"val_loss", r->val_loss},         {"val_miou", r->val_miou},
              {"val_acc", r->val_acc},           {"initial_loss", r->initial_loss},
              {"wall_s", r->wall_s}};
  for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
    fprintf(f, "  \"%s\": ", nums[i].key);
    json_number(f, nums[i].v);
    fputs(",\n", f);
  }
  fprintf(f, "  \"skipped_steps\": %ld,\n  \"class_iou\": [", r->skipped_steps);
  for (int c = 0; c < r->classes && c < SUMMARY_MAX_CLASSES; c++) {
    if (c) fputs(", ", f);
    json_number(f, r->class_iou[c]);
  }
  fprintf(f, "],\n  \"miou_classes\": %d,\n  \"class_present\": [", r->miou_classes);
  for (int c = 0; c < r->classes && c < SUMMARY_MAX_CLASSES; c++)
    fprintf(f, "%s%s", c ? ", " : "", isfinite(r->class_iou[c]) ? "true" : "false");
  if (r->labels_counted) {
    int k = r->classes < SUMMARY_MAX_CLASSES ? r->classes : SUMMARY_MAX_CLASSES;
    fputs("],\n  \"label_pixels\": {\"train\": ", f);
    json_numbers(f, r->label_pixels[0], k);
    fputs(", \"train_ignored\": ", f);
    json_number(f, r->ignored_pixels[0]);
    fputs(", \"val\": ", f);
    json_numbers(f, r->label_pixels[1], k);
    fputs(", \"val_ignored\": ", f);
    json_number(f, r->ignored_pixels[1]);
    fputs("}", f);
  } else {
    fputs("]", f);
  }
  fputs(",\n  \"peak_mib_per_rank\": [", f);
  for (int i = 0; i < r->world && i < SHMDDP_MAX_RANKS; i++) {
    if (i) fputs(", ", f);
    json_number(f, r->peak_mib[i]);
  }
  fputs("],\n  \"restarts\": [", f);
  for (int i = 0; i < r->nrestarts; i++) {
    fprintf(f, "%s{\"step\": %ld, \"reason\": ", i ? ", " : "", r->restarts[i].step);
    json_string(f, r->restarts[i].reason);
    fputc('}', f);
  }
  fputs("],\n  \"run_id\": ", f);
  if (r->run_id) json_string(f, r->run_id);
  else fputs("null", f);
  fputs(",\n  \"config\": ", f);
  json_string(f, config ? config : "");
  if (memory_json) fprintf(f, ",\n  \"memory\": %s", memory_json);
  fputs("\n}\n", f);
  if (outfile_commit(f, tmp, path, 1) != 0)
    return check_fail(err, errlen, "%s: cannot write: %s", path, strerror(errno));
  return 0;
}
