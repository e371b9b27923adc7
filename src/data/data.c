/* data.c — the dataset interface's dispatch: callers never see which kind they hold. */
#include "config.h"

#include "src/data/data.h"

#include <stdio.h>

#include "src/check.h"

int data_get(const data_set_t *ds, size_t index, uint8_t *rgb, uint8_t *mask, int *width,
             int *height, char *err, size_t errlen)
{
  if (index >= ds->size) {
    return check_fail(err, errlen, "%s: sample %zu requested, the dataset has %zu", ds->name, index,
                      ds->size);
  }
  return ds->ops->get(ds, index, rgb, mask, width, height, err, errlen);
}

void data_destroy(data_set_t *ds)
{
  if (ds) ds->ops->destroy(ds);
}
