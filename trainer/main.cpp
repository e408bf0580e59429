// meshtrain: the LibTorch trainer that ships with meshtest.
#include "cli.h"

int main(int argc, char** argv) { return meshtrain_main(argc, argv); }
