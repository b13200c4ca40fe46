/* The library's release at run time (ocms_client.h: OCMS_VERSION_STRING is the header's). */
#include "ocms_client.h"

const char *ocms_version(void) { return OCMS_VERSION_STRING; }
