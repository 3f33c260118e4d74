/* Files written whole or not at all: the temporary name next to the target that a writer creates and
 * then renames over it, so a reader never sees half a file. */
#ifndef TSR_RUNTIME_FILES_H
#define TSR_RUNTIME_FILES_H

/* path + ".tmp", malloc'ed (the caller frees it); NULL when out of memory. */
char *_tsr_tmp_path(const char *path);

#endif
