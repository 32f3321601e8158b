CREATE OR REPLACE FUNCTION fairness.check_head_forward()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
  IF NEW.tree_size < OLD.tree_size THEN
    RAISE EXCEPTION 'fairness.head: the tree never shrinks (% -> %)', OLD.tree_size, NEW.tree_size;
  END IF;
  IF NEW.tree_size <> (SELECT coalesce(max(idx) + 1, 0) FROM fairness.leaves) THEN
    RAISE EXCEPTION 'fairness.head: tree size % does not match the leaves', NEW.tree_size;
  END IF;
  RETURN NEW;
END $function$;
