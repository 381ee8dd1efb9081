#pragma once
// Ctrl-C while the model generates stops the generation, not the program (llama-cli's habit): the
// command prints what it has and its speed line. A second Ctrl-C before the first was taken, or one
// while nothing asked for it, ends the process as usual.

namespace fasa::cli {

// From now on SIGINT sets a flag instead of ending the process (reads of standard input on the calling
// thread are interrupted, not restarted, so a prompt waiting for a line returns; so would any other
// blocking call there, which the commands' stdout writes tolerate: a lost piece of streamed text after
// a Ctrl-C). Call it on the thread that reads input; a signal another thread receives is passed on to it.
void catch_interrupts();
// Whether Ctrl-C was pressed since the last call; clears it.
bool take_interrupt();
// Whether Ctrl-C was pressed and not taken yet; leaves it.
bool interrupt_pending();

}  // namespace fasa::cli
