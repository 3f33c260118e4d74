#include "testutil.h"
static Suite *s(void){Suite *s=suite_create("placeholder");return s;}
TT_MAIN(s)
